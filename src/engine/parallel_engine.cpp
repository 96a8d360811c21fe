#include "engine/parallel_engine.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "dist/communicator.h"

namespace kvik {

namespace {

// Resident set size of this process (/proc/self/statm's second field, in pages).
int64_t resident_bytes() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / 1048576.0; }

}  // namespace

std::optional<int> run_parallel_worker(const std::string& model_path, const EngineConfig& config) {
  if (!config.parallel.enabled()) return std::nullopt;
  if (!dist::launched_by_mpirun())
    fail("--tensor-parallel-size {} x --pipeline-parallel-size {} needs {} processes: start kvik with mpirun -np {}",
         config.parallel.tensor_parallel_size, config.parallel.pipeline_parallel_size, config.parallel.world_size(),
         config.parallel.world_size());
  if (dist::world()->rank() == 0) return std::nullopt;
  // mpirun forwards SIGINT / SIGTERM to every rank: rank 0 shuts down (its server drains, then tells the others to
  // stop); the other ranks wait for that instead of dying under a step.
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGTERM, SIG_IGN);
  auto model = load_model(model_path, config);
  EngineCore engine(*model, config, {});
  engine.run_worker_steps();
  return 0;
}

void check_parallel_engine_config(const EngineConfig& c) {
  if (c.speculative.method == SpeculativeConfig::Method::kDraftModel)
    fail(
        "--speculative-config: a draft model does not run with --tensor-parallel-size / --pipeline-parallel-size "
        "yet; use \"ngram\" or \"suffix\"");
}

KvCapacity plan_parallel_kv_capacity(const LlamaModel& model, const KvCacheBudget& budget, bool log) {
  const ModelShard& s = model.shard();
  dist::Communicator& world = model.world();
  // This rank's KV: its KV heads (model.config() is the shard's) of its stage's layers.
  ModelConfig mc = model.config();
  mc.n_layers = s.end_layer - s.first_layer;
  KvCacheBudget b = budget;
  if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))  // ranks on one host share its RAM
    b.memory_utilization /= std::max(1, std::atoi(local));
  KvCapacity k = plan_kv_capacity(mc, b, model.resident_weight_bytes());
  const int64_t mine_blocks = k.num_blocks;
  int64_t agreed[2] = {k.num_blocks, k.local_num_blocks};
  world.all_reduce_min(agreed, 2);
  k.num_blocks = agreed[0];
  k.local_num_blocks = agreed[1];
  k.tokens = k.num_blocks * b.block_size;
  k.gib = static_cast<double>(k.num_blocks * b.block_size * k.bytes_per_token) / static_cast<double>(int64_t{1} << 30);
  k.max_concurrency = static_cast<double>(k.tokens) / static_cast<double>(b.max_model_len);

  // The memory table: per rank, its weights (computed and resident), its KV bytes per token and pool, and in a
  // mixture-of-experts model the experts it holds ([first, end): whole under expert parallelism) and their bytes.
  constexpr int kCols = 9;
  const int64_t row[kCols] = {model.resident_weight_bytes(),
                              resident_bytes(),
                              k.bytes_per_token,
                              k.num_blocks * b.block_size * k.bytes_per_token,
                              mine_blocks,
                              s.end_layer - s.first_layer,
                              model.expert_weight_bytes(),
                              s.first_expert,
                              s.end_expert};
  std::vector<int64_t> all(kCols * static_cast<size_t>(world.size()));
  world.all_gather(row, kCols, all.data());
  if (!log || world.rank() != 0) return k;
  log_info(
      "parallel job: {} ranks = tensor parallel {} x pipeline parallel {}{}; KV pool of {} blocks of {} on every rank",
      world.size(), s.tp_size, s.pp_size, s.expert_parallel ? " (expert parallel)" : "", k.num_blocks, b.block_size);
  const int64_t E = model.config().n_experts;
  int64_t total_weights = 0, total_kv = 0;
  for (int r = 0; r < world.size(); ++r) {
    const int64_t* x = &all[kCols * r];
    const std::string experts =
        E == 0 ? ""
               : fmt::format(", experts [{}, {}) of {}{} {:.1f} MiB", x[7], x[8], E,
                             s.expert_parallel || s.tp_size == 1 ? ":" : " (d_ff_exp sliced):", mib(x[6]));
    log_info(
        "  rank {} (stage {}, tensor rank {}): {} layers, weights {:.1f} MiB (resident {:.1f} MiB), KV {} bytes per "
        "token, {:.1f} MiB for {} tokens (it could hold {} blocks){}",
        r, r / s.tp_size, r % s.tp_size, x[5], mib(x[0]), mib(x[1]), x[2], mib(x[3]), k.tokens, x[4], experts);
    total_weights += x[0];
    total_kv += x[3];
  }
  log_info("  total: weights {:.1f} MiB (the model file: {:.1f} MiB), KV {:.1f} MiB", mib(total_weights),
           mib(model.weight_bytes()), mib(total_kv));
  return k;
}

namespace {

// "rank R: KV blocks free at shutdown: F of N" (and the local layers' pool's), from this rank's ledgers.
void log_ledger_at_shutdown(int rank, const RankBlockLedgers& l) {
  log_info("rank {}: KV blocks free at shutdown: {} of {}", rank, l.main().num_free_blocks(), l.main().num_blocks());
  if (const KvBlockLedger* local = l.local())
    log_info("rank {}: local layers' KV blocks free at shutdown: {} of {}", rank, local->num_free_blocks(),
             local->num_blocks());
}

}  // namespace

EngineCore::~EngineCore() {
  if (!model_.shard().distributed() || model_.world().rank() != 0) return;
  runner_->stop_workers(*kv_);  // with the last ledger edits: every rank's ledger ends where this pool does
  log_info("parallel job: {} preemptions; KV blocks free at shutdown: {} of {}", scheduler_->num_preemptions_total(),
           kv_->pool().num_free_blocks(), capacity_.num_blocks);
  log_ledger_at_shutdown(0, *runner_->ledgers());
  // What the ledgers cost on the wire: per step R request handles (4 bytes each) and these edits (16 bytes each).
  const int64_t steps = std::max<int64_t>(1, runner_->num_steps_broadcast());
  const int64_t edits = runner_->ledgers()->num_edits_published();
  log_info("parallel job: {} ledger edits in {} steps ({:.1f} bytes of edits per step)", edits, steps,
           16.0 * static_cast<double>(edits) / static_cast<double>(steps));
}

void EngineCore::run_worker_steps() {
  while (runner_->execute_remote()) {
  }
  log_ledger_at_shutdown(model_.world().rank(), *runner_->ledgers());
}

}  // namespace kvik
