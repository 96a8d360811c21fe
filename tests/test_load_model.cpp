// The thread count and the repack switch are engine config (EngineConfig::num_threads / repack_weights): applied by
// load_model() and EngineCore, not by a process-wide switch that flag parsing flips.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine_core.h"
#include "synth_models.h"

namespace kvik {
namespace {

TEST(LoadModel, AppliesTheThreadCountAndTheRepackSwitch) {
  const std::string path = test_models::write_synth_gqa("kvik_load_model.gguf", 3);  // F32 weights
  const int before = ThreadPool::global().num_threads();
  EngineConfig cfg;
  cfg.num_threads = 2;
  cfg.repack_weights = false;
  auto plain = load_model(path, cfg);
  EXPECT_EQ(ThreadPool::global().num_threads(), 2);
  EXPECT_EQ(plain->resident_weight_bytes(), plain->weight_bytes());  // nothing repacked, no page handed back
  cfg.repack_weights = true;
  cfg.num_threads = 1;
  auto packed = load_model(path, cfg);
  EXPECT_EQ(ThreadPool::global().num_threads(), 1);
  // Off or on, the model computes the same (the packed kernels equal the plain ones bit for bit; on a CPU without
  // packed kernels, as the AVX2 table, on packs nothing).
  EXPECT_EQ(packed->weight_bytes(), plain->weight_bytes());
  // EngineCore applies num_threads too (0 leaves the pool as it is); a negative count is refused.
  cfg.num_threads = 3;
  cfg.num_kv_blocks = 16;
  cfg.max_model_len = 256;
  cfg.log_stats = false;
  EngineCore engine(*plain, cfg, {});
  EXPECT_EQ(ThreadPool::global().num_threads(), 3);
  cfg.num_threads = 0;
  EngineCore same(*plain, cfg, {});
  EXPECT_EQ(ThreadPool::global().num_threads(), 3);
  cfg.num_threads = -1;
  EXPECT_THROW(EngineCore(*plain, cfg, {}), Error);
  ThreadPool::global().set_num_threads(before);
}

}  // namespace
}  // namespace kvik
