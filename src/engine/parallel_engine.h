// Tensor and pipeline parallelism across processes (vLLM's multiproc / Ray executors, over MPI here): world rank 0
// runs the scheduler, the sampler and the front end (HTTP server, CLI); every rank holds its shard of the model
// (model/model_shard.h) and its share of the KV pool. Each step rank 0's ModelRunner broadcasts the flat batch and
// the copy-on-write block copies; every rank runs its part of the forward pass.
#pragma once

#include <optional>
#include <string>

#include "engine/engine_core.h"

namespace kvik {

// Under mpirun with --tensor-parallel-size / --pipeline-parallel-size, on every rank but 0: loads this rank's
// shard, builds its engine and runs rank 0's steps until rank 0 stops; returns the exit code. On rank 0 and in a
// one-process run returns nullopt (the command goes on). Call first thing in a command that runs the engine.
std::optional<int> run_parallel_worker(const std::string& model_path, const EngineConfig& config);

// Start-up checks of the engine features that do not combine with parallelism yet (fails naming the flag).
void check_parallel_engine_config(const EngineConfig& config);

// Every rank plans its KV pool from its own memory (its layers' and KV heads' bytes per token, its weights); all
// take the smallest block count, so a block id means the same slots on every rank. Rank 0 logs the memory table:
// each rank's weight bytes, resident memory and KV capacity, and the total.
KvCapacity plan_parallel_kv_capacity(const LlamaModel& model, const KvCacheBudget& budget, bool log);

}  // namespace kvik
