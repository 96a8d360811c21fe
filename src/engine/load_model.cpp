// load_model(): the engine config's thread count and load options, applied before the model is read (the
// weights are repacked on the thread pool).
#include <algorithm>
#include <cstdlib>
#include <thread>

#include "core/log.h"
#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "kernels/cpu/amx_support.h"
#include "kernels/cpu/cpu_kernels.h"

namespace kvik {

std::unique_ptr<LlamaModel> load_model(const std::string& path, const EngineConfig& config) {
  if (config.num_threads > 0) {
    ThreadPool::global().set_num_threads(config.num_threads);
  } else if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); local && config.parallel.enabled()) {
    // Ranks sharing a host share its cores: each takes its part instead of all of them.
    const int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, std::atoi(local)));
    ThreadPool::global().set_num_threads(n);
  }
  log_info("CPU kernels: {}, {} threads", cpu_kernels().isa, ThreadPool::global().num_threads());
  if (const AmxStatus& amx = amx_status(); amx.cpu_has_amx && !cpu_kernels().amx_q8_0)
    log_info("AMX-INT8 not used: {}", amx.usable ? "KVIK_ISA caps the kernels below amx" : amx.reason);
  else if (amx.cpu_has_amx && !cpu_kernels().amx_bf16)
    log_info("AMX-BF16 not used: {}", amx.bf16_reason);
  LoadOptions options;
  options.repack_weights = config.repack_weights;
  options.parallel = config.parallel;
  return LlamaModel::load(path, options);
}

}  // namespace kvik
