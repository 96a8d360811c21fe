// kvik serve --data-parallel-size D: D engine replicas behind one endpoint. The front process starts D children of
// its own binary (`kvik serve` with the same arguments on a loopback port, --threads split between them, sharing a
// secret block-hash seed), waits until each answers /health, and serves the public port through
// server::DataParallelRouter. Children die with the front (PR_SET_PDEATHSIG); one that ends is reaped, logged and
// not restarted.
#pragma once

#include <cstdint>
#include <string>

#include "server/routes.h"

namespace kvik::cli {

struct DataParallelOptions {
  int64_t size = 1;
  std::string model;
  std::string chat_template;  // --chat-template's text, "" = the model's
  server::ServerConfig server;
  int32_t num_threads = 0;  // --threads of the whole front (0 = every core), split between the replicas
  double shutdown_grace_s = 10;
};

// The environment variable that hands a replica the front's block-hash seed (read and cleared by the replica).
inline constexpr const char* kBlockHashSeedEnv = "KVIK_DP_BLOCK_HASH_SEED";

// Runs the front until SIGINT/SIGTERM; returns the exit status.
int serve_data_parallel(DataParallelOptions o);

// In a replica: adopts the front's block-hash seed when one was handed down (kBlockHashSeedEnv).
void adopt_block_hash_seed();

}  // namespace kvik::cli
