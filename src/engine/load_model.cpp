// load_model(): the engine config's thread count and load options, applied before the model is read (the
// weights are repacked on the thread pool).
#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "kernels/cpu/cpu_kernels.h"

namespace kvik {

std::unique_ptr<LlamaModel> load_model(const std::string& path, const EngineConfig& config) {
  if (config.num_threads > 0) ThreadPool::global().set_num_threads(config.num_threads);
  log_info("CPU kernels: {}, {} threads", cpu_kernels().isa, ThreadPool::global().num_threads());
  LoadOptions options;
  options.repack_weights = config.repack_weights;
  return LlamaModel::load(path, options);
}

}  // namespace kvik
