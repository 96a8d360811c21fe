// Paged attention alone, as JSON: the time of L layers' attention for B requests of R query rows each over N
// keys (R = 1: decode, the KV read dominates; R = N: a whole prefill) on shuffled blocks of a KV cache of the given
// type, and for decode the KV bytes read per second. Each layer has a cache of its own, so with --layers 16 (the 1B
// shape) a decode reads a model's KV from memory as the engine does, where one layer's (16.8 MB at 8192 keys) may
// stay in a large L3 from one iteration to the next.
//   bench_attention [--keys 8192] [--rows 1] [--reqs 1] [--heads 32] [--kv-heads 8] [--head-dim 64] [--layers 1]
//                   [--kv f16|f32|q8_0|fp8] [--iters 20] [--threads N] [--split 1|0]
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/paged_attention.h"

using namespace kvik;

int main(int argc, char** argv) {
  int32_t keys = 8192, rows = 1, reqs = 1, iters = 20, threads = 0, layers = 1;
  int64_t heads = 32, kv_heads = 8, d = 64;
  std::string kv = "f16";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    const char* v = argv[i + 1];
    if (f == "--keys")
      keys = std::atoi(v);
    else if (f == "--rows")
      rows = std::atoi(v);
    else if (f == "--reqs")
      reqs = std::atoi(v);
    else if (f == "--heads")
      heads = std::atoll(v);
    else if (f == "--kv-heads")
      kv_heads = std::atoll(v);
    else if (f == "--head-dim")
      d = std::atoll(v);
    else if (f == "--kv")
      kv = v;
    else if (f == "--layers")
      layers = std::max(1, std::atoi(v));
    else if (f == "--iters")
      iters = std::atoi(v);
    else if (f == "--threads")
      threads = std::atoi(v);
    else if (f == "--split")  // flash-decoding on (1, the default) or off (0)
      set_split_attention(std::atoi(v) != 0);
    else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  if (threads > 0) ThreadPool::global().set_num_threads(threads);
  if (kv != "f32" && kv != "f16" && kv != "q8_0" && kv != "fp8") {
    std::fprintf(stderr, "--kv must be f32, f16, q8_0 or fp8, not %s\n", kv.c_str());
    return 2;
  }
  const DType dt = kv == "f32" ? DType::F32 : kv == "q8_0" ? DType::Q8_0 : kv == "fp8" ? DType::F8_E4M3 : DType::F16;
  const int32_t bs = 16, nb = (keys + bs - 1) / bs;
  const int64_t kv_dim = kv_heads * d, row = kv_row_bytes(dt, kv_dim);
  std::vector<int32_t> table(static_cast<size_t>(nb) * reqs);
  std::iota(table.begin(), table.end(), 0);
  std::mt19937 rng(1);
  std::shuffle(table.begin(), table.end(), rng);
  const size_t cache_bytes = static_cast<size_t>(row) * table.size() * bs;
  // Page-aligned anonymous mappings, as the engine's pool (KvCacheTensors): a vector's misaligned rows straddled a
  // cache line more and read 10-15% slower.
  struct Mapping {
    void* p;
    size_t bytes;
    ~Mapping() { munmap(p, bytes); }
    uint8_t* data() const { return static_cast<uint8_t*>(p); }
  };
  std::vector<std::unique_ptr<Mapping>> kc, vc;
  auto map = [&] {
    void* p = mmap(nullptr, cache_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "cannot map %zu bytes for the KV cache\n", cache_bytes);
      std::exit(1);
    }
    return std::unique_ptr<Mapping>(new Mapping{p, cache_bytes});
  };
  for (int32_t l = 0; l < layers; ++l) kc.push_back(map()), vc.push_back(map());
  std::normal_distribution<float> g;
  std::vector<float> x(static_cast<size_t>(kv_dim) * bs), y(x.size());
  std::vector<int64_t> slots(bs);
  for (int32_t l = 0; l < layers; ++l)
    for (size_t b = 0; b < table.size(); ++b) {
      for (auto& e : x) e = g(rng);
      for (auto& e : y) e = g(rng);
      for (int32_t s = 0; s < bs; ++s) slots[s] = static_cast<int64_t>(b) * bs + s;
      write_kv(x.data(), y.data(), slots.data(), bs, kv_dim, kc[l]->data(), vc[l]->data(), dt);
    }
  const int32_t T = rows * reqs;
  std::vector<float> q(static_cast<size_t>(T * heads * d)), out(q.size());
  for (auto& e : q) e = g(rng);
  std::vector<int32_t> qsl(reqs + 1), seq(reqs, keys), pos(T);
  for (int32_t r = 0; r <= reqs; ++r) qsl[r] = r * rows;
  for (int32_t t = 0; t < T; ++t) pos[t] = keys - rows + t % rows;
  PagedAttentionArgs a;
  a.q = q.data(), a.kv_dtype = dt, a.out = out.data();
  a.num_reqs = reqs, a.query_start_loc = qsl.data(), a.seq_lens = seq.data(), a.positions = pos.data();
  a.block_tables = table.data(), a.max_blocks_per_seq = nb, a.block_size = bs;
  a.n_heads = heads, a.n_kv_heads = kv_heads, a.head_dim = d, a.scale = 1.0f / std::sqrt(static_cast<float>(d));
  auto all_layers = [&] {
    for (int32_t l = 0; l < layers; ++l) {
      a.k_cache = kc[l]->data(), a.v_cache = vc[l]->data();
      paged_attention(a);
    }
  };
  all_layers();  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    all_layers();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2], best = ms.front();
  const double kv_bytes = 2.0 * static_cast<double>(row) * keys * reqs * layers;
  std::printf(
      "{\"keys\": %d, \"rows\": %d, \"reqs\": %d, \"layers\": %d, \"heads\": %lld, \"kv_heads\": %lld, "
      "\"head_dim\": %lld, \"kv\": \"%s\", \"threads\": %d, \"ms_median\": %.4f, \"ms_min\": %.4f, "
      "\"kv_gb_s\": %.2f}\n",
      keys, rows, reqs, layers, static_cast<long long>(heads), static_cast<long long>(kv_heads),
      static_cast<long long>(d), kv.c_str(), ThreadPool::global().num_threads(), med, best, kv_bytes / med / 1e6);
  return 0;
}
