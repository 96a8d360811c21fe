#include "kernels/cpu/amx_support.h"

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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
  ActQ8S x() const { return {qs.data(), d.data(), sums.data(), nb}; }
};

// In the child: the AMX kernels against the AVX-512 ones. 0 = equal, 1 = different.
int run_self_test(SelfTestCase& q8, SelfTestCase& q4) {
  const CpuKernels& base = *avx512_kernels();
  const CpuKernels& amx = *amx_kernels();
  for (SelfTestCase* c : {&q8, &q4}) {
    const bool is_q8 = c == &q8;
    for (int64_t g = 0; g < c->groups; ++g)
      (is_q8 ? base.gemm_q8_0_x16 : base.gemm_q4_0_x16)(c->w.data() + c->gb * g, c->nb, c->x(), c->R,
                                                        c->want.data() + g * kPackRows, c->groups * kPackRows);
    (is_q8 ? amx.amx_q8_0 : amx.amx_q4_0)(c->w.data(), c->groups, c->gb, c->nb, c->x(), c->R, c->got.data(),
                                          c->groups * kPackRows);
    if (std::memcmp(c->want.data(), c->got.data(), c->want.size() * sizeof(float)) != 0) return 1;
  }
  return 0;
}

AmxStatus probe() {
  AmxStatus s;
  s.cpu_has_amx = cpu_reports_amx();
  if (!s.cpu_has_amx) return s.reason = "the CPU has no AMX-INT8", s;
  if (!amx_kernels() || !avx512_kernels()) return s.reason = "this build has no AMX kernels", s;
  if (std::string why = request_tile_permission(); !why.empty()) return s.reason = why, s;
  SelfTestCase q8(DType::Q8_0, 1), q4(DType::Q4_0, 2);  // allocated before the fork: the child allocates nothing
  const pid_t pid = fork();
  if (pid < 0) return s.reason = std::string("the AMX self-test could not fork: ") + std::strerror(errno), s;
  if (pid == 0) _exit(run_self_test(q8, q4));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    return s.reason = std::string("the AMX self-test died with signal ") + strsignal(WTERMSIG(status)), s;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return s.reason = "the AMX self-test's results differ from the AVX-512 kernels'", s;
  s.usable = true;
  return s;
}

}  // namespace

const AmxStatus& amx_status() {
  static const AmxStatus s = probe();
  return s;
}

}  // namespace kvik
