#include "kernels/cpu/amx_support.h"

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/packed.h"

namespace kvik {
namespace {

constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

bool cpu_reports_amx() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-int8") &&
         __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

std::string request_tile_permission() {
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0)
    return std::string("the Linux kernel refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: ") +
           std::strerror(errno) + ")";
  unsigned long mask = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &mask) != 0 || !(mask & (1ul << kXfeatureXtiledata)))
    return "the Linux kernel did not grant the AMX tile state (ARCH_GET_XCOMP_PERM)";
  return {};
}

// A small packed weight of `groups` 16-row groups (random quants, fp16 scales in [0.5, 2)) and R activation rows.
struct SelfTestCase {
  int64_t nb = 8, groups = 2, R = kAmxMaxTokens;
  std::vector<uint8_t> w;
  size_t gb = 0;
  std::vector<int8_t> qs;
  std::vector<float> d;
  std::vector<int32_t> sums;
  std::vector<float> want, got;
  SelfTestCase(DType t, uint32_t seed) {
    std::mt19937 rng(seed);
    const int64_t Q = t == DType::Q8_0 ? kQ8_0PackedQs : kQ4_0PackedQs;
    gb = packed_group_bytes(t, nb * kQK8_0);
    w.resize(gb * groups);
    for (auto& b : w) b = static_cast<uint8_t>(rng());
    std::uniform_real_distribution<float> scale(0.5f, 2.0f);
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t b = 0; b < nb; ++b)
        for (int i = 0; i < kPackRows; ++i) {
          const uint16_t h = f32_to_fp16(scale(rng));
          std::memcpy(&w[gb * g + packed_d_offset(b, Q) + 2 * i], &h, 2);
        }
    qs.resize(R * nb * kQK8_0), d.resize(R * nb), sums.resize(R * nb);
    for (auto& q : qs) q = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
    for (int64_t r = 0; r < R * nb; ++r) {
      d[r] = scale(rng);
      int32_t s = 0;
      for (int j = 0; j < kQK8_0; ++j) s += qs[r * kQK8_0 + j];
      sums[r] = s;
    }
    want.resize(R * groups * kPackRows), got.resize(want.size());
  }
  ActQ8S x(int64_t t0 = 0) const {
    return {qs.data() + t0 * nb * kQK8_0, d.data() + t0 * nb, sums.data() + t0 * nb, nb};
  }
};

// A packed BF16 weight of 3 groups (a pair and a single) with 3 blocks of inputs, and R activation rows (rounded
// through bf16 for the x16 kernel, in tile layout for AMX); weights and inputs in [−2, 2].
struct Bf16SelfTestCase {
  int64_t n = 3 * kBF16TileK, groups = 3, R = kAmxMaxTokens;
  size_t gb = packed_group_bytes(DType::BF16, n);
  std::vector<uint8_t> w = std::vector<uint8_t>(gb * groups);
  std::vector<float> x = std::vector<float>(R * n);
  std::vector<uint16_t> tiles = std::vector<uint16_t>(R * bf16_blocks(n) * kBF16TileK);
  std::vector<float> want = std::vector<float>(R * groups * kPackRows), got = want;
  explicit Bf16SelfTestCase(uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> v(-2.0f, 2.0f);
    for (int64_t g = 0; g < groups; ++g)
      for (int i = 0; i < kPackRows; ++i)
        for (int64_t k = 0; k < n; ++k) {
          const uint16_t h = f32_to_bf16(v(rng));
          std::memcpy(&w[gb * g + 2 * packed_bf16_index(k, i)], &h, 2);
        }
    for (auto& f : x) f = bf16_to_f32(f32_to_bf16(v(rng)));
    for (int64_t t = 0; t < R; ++t) bf16_pair_activations(&x[t * n], n, false, &tiles[t * bf16_blocks(n) * kBF16TileK]);
  }
};

// In the child: the AMX kernels against the AVX-512 ones. 0 = equal, 1 = different.
int run_bf16_self_test(Bf16SelfTestCase& c) {
  const CpuKernels& base = *avx512_kernels();
  const CpuKernels& amx = *amx_kernels(true, false);
  // The x16 kernels take at most kPackMaxTokens tokens a call.
  for (int64_t t = 0; t < c.R; t += kPackMaxTokens)
    base.gemm_bf16_x16(c.w.data(), c.groups, c.gb, c.n, c.x.data() + t * c.n, c.n, std::min(kPackMaxTokens, c.R - t),
                       c.want.data() + t * c.groups * kPackRows, c.groups * kPackRows);
  amx.amx_bf16(c.w.data(), c.groups, c.gb, bf16_blocks(c.n), c.tiles.data(), c.R, c.got.data(), c.groups * kPackRows);
  return std::memcmp(c.want.data(), c.got.data(), c.want.size() * sizeof(float)) == 0 ? 0 : 1;
}

int run_self_test(SelfTestCase& q8, SelfTestCase& q4) {
  const CpuKernels& base = *avx512_kernels();
  const CpuKernels& amx = *amx_kernels(false, false);
  for (SelfTestCase* c : {&q8, &q4}) {
    const bool is_q8 = c == &q8;
    for (int64_t g = 0; g < c->groups; ++g)
      for (int64_t t = 0; t < c->R; t += kPackMaxTokens)  // the x16 kernels take at most kPackMaxTokens tokens a call
        (is_q8 ? base.gemm_q8_0_x16 : base.gemm_q4_0_x16)(
            c->w.data() + c->gb * g, c->nb, c->x(t), std::min(kPackMaxTokens, c->R - t),
            c->want.data() + (t * c->groups + g) * kPackRows, c->groups * kPackRows);
    (is_q8 ? amx.amx_q8_0 : amx.amx_q4_0)(c->w.data(), c->groups, c->gb, c->nb, c->x(), c->R, c->got.data(),
                                          c->groups * kPackRows);
    if (std::memcmp(c->want.data(), c->got.data(), c->want.size() * sizeof(float)) != 0) return 1;
  }
  return 0;
}

// Runs test() in a forked child: empty when it exits 0, else why not (`what` names the test).
template <class Test>
std::string in_child(const char* what, Test&& test) {
  const pid_t pid = fork();
  if (pid < 0) return std::string("the ") + what + " self-test could not fork: " + std::strerror(errno);
  if (pid == 0) _exit(test());
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    return std::string("the ") + what + " self-test died with signal " + strsignal(WTERMSIG(status));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return std::string("the ") + what + " self-test's results differ from the AVX-512 kernels'";
  return {};
}

AmxStatus probe() {
  AmxStatus s;
  s.cpu_has_amx = cpu_reports_amx();
  if (!s.cpu_has_amx) return s.reason = s.bf16_reason = "the CPU has no AMX-INT8", s;
  if (!amx_kernels(false, false) || !avx512_kernels())
    return s.reason = s.bf16_reason = "this build has no AMX kernels", s;
  if (std::string why = request_tile_permission(); !why.empty()) return s.reason = s.bf16_reason = why, s;
  SelfTestCase q8(DType::Q8_0, 1), q4(DType::Q4_0, 2);  // allocated before the fork: the child allocates nothing
  if (std::string why = in_child("AMX", [&] { return run_self_test(q8, q4); }); !why.empty())
    return s.reason = s.bf16_reason = why, s;
  s.usable = true;
  if (!__builtin_cpu_supports("amx-bf16")) return s.bf16_reason = "the CPU has no AMX-BF16", s;
  Bf16SelfTestCase bf16(3);
  if (std::string why = in_child("AMX-BF16", [&] { return run_bf16_self_test(bf16); }); !why.empty())
    return s.bf16_reason = why, s;
  s.bf16_usable = true;
  return s;
}

}  // namespace

const AmxStatus& amx_status() {
  static const AmxStatus s = probe();
  return s;
}

}  // namespace kvik
