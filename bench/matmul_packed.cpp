// One packed matmul alone, as JSON: the time of y = x·Wᵀ for a rows × cols weight of each type and each token count,
// through whatever table cpu_kernels() chose (KVIK_ISA, KVIK_AMX_MIN_TOKENS steer it). bench/amx_crossover.sh runs
// it with and without the AMX kernels to find, per type, the token count from which tiles win.
//   bench_matmul_packed [--rows 2048] [--cols 2048] [--tokens 1,2,4,8,12,16,32,64,256] [--types q8_0,q4_0,...]
//                       [--iters 0 (auto: about 0.2 s each)] [--threads N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/amx_support.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed.h"
#include "tensor/quantize.h"

using namespace kvik;

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 2048, cols = 2048;
  int iters = 0, threads = 0;
  std::string tokens = "1,2,4,8,12,16,32,64,256", types = "q8_0,q4_0,iq4_nl,q5_0,q4_1,q5_1,q4_K,q5_K,q6_K,bf16";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--rows")
      rows = std::atoll(v.c_str());
    else if (f == "--cols")
      cols = std::atoll(v.c_str());
    else if (f == "--tokens")
      tokens = v;
    else if (f == "--types")
      types = v;
    else if (f == "--iters")
      iters = std::atoi(v.c_str());
    else if (f == "--threads")
      threads = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  if (threads > 0) ThreadPool::global().set_num_threads(threads);
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> wf(rows * cols);
  for (auto& v : wf) v = g(rng);
  const AmxStatus& amx = amx_status();
  std::printf(
      "{\"isa\": \"%s\", \"amx_usable\": %s, \"amx_reason\": \"%s\", \"amx_bf16_usable\": %s, "
      "\"amx_bf16_reason\": \"%s\", \"threads\": %d, \"rows\": %lld, \"cols\": %lld, \"results\": [",
      std::string(cpu_kernels().isa).c_str(), amx.usable ? "true" : "false", amx.reason.c_str(),
      amx.bf16_usable ? "true" : "false", amx.bf16_reason.c_str(), ThreadPool::global().num_threads(), (long long)rows,
      (long long)cols);
  bool first = true;
  for (const std::string& name : split_list(types)) {
    const std::optional<DType> t = dtype_from_name(name);
    if (!t) {
      std::fprintf(stderr, "unknown type %s\n", name.c_str());
      return 2;
    }
    const size_t rb = *row_bytes(*t, cols);
    std::vector<uint8_t> data(rb * rows);
    for (int64_t r = 0; r < rows; ++r) quantize_row(*t, wf.data() + r * cols, data.data() + rb * r, cols);
    WeightMatrix w{*t, rows, cols, data.data(), rb};
    const PackedBuffer owner = pack_weight(w);
    for (const std::string& ts : split_list(tokens)) {
      const int64_t T = std::atoll(ts.c_str());
      std::vector<float> x(T * cols), y(T * rows);
      for (auto& v : x) v = g(rng);
      matmul(x.data(), T, w, y.data());  // warm-up: buffers, packed pages, tile configuration
      int n = iters;
      if (n <= 0) {
        const auto t0 = std::chrono::steady_clock::now();
        matmul(x.data(), T, w, y.data());
        n = std::clamp(static_cast<int>(0.2 / std::max(seconds_since(t0), 1e-6)), 3, 2000);
      }
      std::vector<double> times;
      for (int i = 0; i < n; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        matmul(x.data(), T, w, y.data());
        times.push_back(seconds_since(t0));
      }
      std::sort(times.begin(), times.end());
      const double med = times[times.size() / 2];
      std::printf("%s\n  {\"type\": \"%s\", \"tokens\": %lld, \"packed\": %s, \"median_us\": %.2f, \"gops\": %.2f}",
                  first ? "" : ",", name.c_str(), (long long)T, w.packed ? "true" : "false", med * 1e6,
                  2.0 * T * rows * cols / med * 1e-9);
      first = false;
    }
  }
  std::printf("\n]}\n");
  return 0;
}
