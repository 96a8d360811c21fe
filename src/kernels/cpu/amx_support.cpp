#include "kernels/cpu/amx_support.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kernels/cpu/amx_self_test.h"

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

// How a forked child ended.
struct ChildEnd {
  std::string fork_error;  // non-empty when there was no child
  int signal = 0;          // the signal that ended it, or 0
  int code = 0;            // its exit code (signal == 0)
};

// Runs test() in a forked child (which must allocate nothing: the parent may have other threads).
template <class Test>
ChildEnd in_child(Test&& test) {
  ChildEnd end;
  const pid_t pid = fork();
  if (pid < 0) return end.fork_error = std::strerror(errno), end;
  if (pid == 0) _exit(test());
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    end.signal = WTERMSIG(status);
  else
    end.code = WIFEXITED(status) ? WEXITSTATUS(status) : 255;
  return end;
}

// One int shared with a forked child (the index of the type it is testing), or null where mmap fails.
struct SharedInt {
  volatile int* p = nullptr;
  SharedInt() {
    void* m = mmap(nullptr, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    p = static_cast<volatile int*>(m);
    *p = -1;
  }
  ~SharedInt() {
    if (p) munmap(const_cast<int*>(p), sizeof(int));
  }
  SharedInt(const SharedInt&) = delete;
  SharedInt& operator=(const SharedInt&) = delete;
};

}  // namespace

std::string amx_int8_self_test_in_child(const CpuKernels& base, const CpuKernels& amx) {
  AmxInt8SelfTest test;  // allocated before the fork: the child allocates nothing
  SharedInt running;
  const ChildEnd end = in_child([&] { return test.run(base, amx, running.p); });
  if (!end.fork_error.empty()) return "the AMX self-test could not fork: " + end.fork_error;
  if (end.signal) {
    const std::string_view type = amx_self_test_type(running.p ? *running.p : -1);
    return std::string("the AMX self-test died with signal ") + strsignal(end.signal) +
           (type.empty() ? std::string() : " while testing the " + std::string(type) + " kernels");
  }
  return end.code == 0 ? std::string() : amx_self_test_failure(end.code);
}

std::string amx_bf16_self_test_in_child(const CpuKernels& base, const CpuKernels& amx) {
  AmxBf16SelfTest test;  // allocated before the fork
  const ChildEnd end = in_child([&] { return test.run(base, amx); });
  if (!end.fork_error.empty()) return "the AMX-BF16 self-test could not fork: " + end.fork_error;
  if (end.signal) return std::string("the AMX-BF16 self-test died with signal ") + strsignal(end.signal);
  return end.code == 0 ? std::string() : "the AMX-BF16 self-test's results differ from the AVX-512 kernels'";
}

namespace {

AmxStatus probe() {
  AmxStatus s;
  s.cpu_has_amx = cpu_reports_amx();
  if (!s.cpu_has_amx) return s.reason = s.bf16_reason = "the CPU has no AMX-INT8", s;
  if (!amx_kernels(false, false) || !avx512_kernels())
    return s.reason = s.bf16_reason = "this build has no AMX kernels", s;
  if (std::string why = request_tile_permission(); !why.empty()) return s.reason = s.bf16_reason = why, s;
  if (std::string why = amx_int8_self_test_in_child(*avx512_kernels(), *amx_kernels(false, false)); !why.empty())
    return s.reason = s.bf16_reason = why, s;
  s.usable = true;
  if (!__builtin_cpu_supports("amx-bf16")) return s.bf16_reason = "the CPU has no AMX-BF16", s;
  if (std::string why = amx_bf16_self_test_in_child(*avx512_kernels(), *amx_kernels(true, false)); !why.empty())
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
