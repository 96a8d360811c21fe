// The AMX-INT8 start-up self-test's body (amx_support.h runs it in a forked child over the real tiles; test_amx
// runs it in-process over emulated tiles and over tables with one deliberately wrong entry). Every amx_* INT8 entry
// of a kernel table against the AVX-512 x16 entry of the same packed type, bit for bit, on small random weights
// quantized and packed by the project's own functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/packed.h"
#include "tensor/dtype.h"

namespace kvik {

using GemmQ8SX16 = void(const uint8_t* group, int64_t nb, const ActQ8S& x, int64_t R, float* y, int64_t ys);
using GemmQ8KSX16 = void(const uint8_t* group, int64_t nb, const ActQ8KS& x, int64_t R, float* y, int64_t ys);

// One packed type's AMX-INT8 entry and the x16 entry it must equal: either the ActQ8S pair (32-element blocks) or
// the ActQ8KS one (K-quant super-blocks).
struct AmxInt8Entry {
  DType type;
  AmxGemmQ8S* CpuKernels::*amx = nullptr;
  GemmQ8SX16* CpuKernels::*x16 = nullptr;
  AmxGemmQ8KS* CpuKernels::*amx_k = nullptr;
  GemmQ8KSX16* CpuKernels::*x16_k = nullptr;
};
// Every AMX-INT8 entry of CpuKernels, in the order the self-test runs them. A type given an amx_* entry must be
// listed here: test_amx checks that these are exactly the table's non-null amx_* INT8 entries.
std::span<const AmxInt8Entry> amx_int8_entries();

// The data of the self-test, allocated by the constructor so that run() allocates nothing (it runs in a child forked
// from a possibly multi-threaded process). Per type: a weight of kGroups 16-row groups (a pair and a single, the two
// paths of the AMX kernels) of 16 random N(0, 1) rows quantized by quantize_row (sane scales and mins; rotated
// differently in each group) and packed by pack_group; an odd number of 32-element blocks (an unpaired last block) or
// two K-quant super-blocks; and kAmxMaxTokens activation rows quantized as the engine does (quantize_act_q8s_ref, or
// quantize_row_q8_k and q8_k_sums32).
class AmxInt8SelfTest {
 public:
  static constexpr int64_t kGroups = 3, kBlocks = 3, kSuperBlocks = 2;
  AmxInt8SelfTest();
  ~AmxInt8SelfTest();
  AmxInt8SelfTest(const AmxInt8SelfTest&) = delete;
  AmxInt8SelfTest& operator=(const AmxInt8SelfTest&) = delete;

  // Every entry of amx_int8_entries() that `amx` has against `base`'s x16 entry of the same type (at most
  // kPackMaxTokens tokens a call), all kAmxMaxTokens rows at once on the AMX side. Returns 0 when every result is
  // the same bits, else 1 + the index of the first type that differs (a null base entry counts as differing). While
  // a type runs, *running (when given) holds its index: a child that dies can still say which type killed it.
  int run(const CpuKernels& base, const CpuKernels& amx, volatile int* running = nullptr);

  struct Case;

 private:
  std::vector<Case> cases_;
};

// The AMX-BF16 self-test's data: a packed BF16 weight of 3 groups (a pair and a single) and 3 blocks of inputs, and
// kAmxMaxTokens activation rows (rounded through bf16 for the x16 kernel, in tile layout for AMX); weights and inputs
// in [−2, 2]: no denormal occurs (where the tiles and the FMA kernels may differ). Built before the fork.
class AmxBf16SelfTest {
 public:
  AmxBf16SelfTest();
  // amx.amx_bf16 against base.gemm_bf16_x16 (at most kPackMaxTokens tokens a call), bit for bit: 0 when the same
  // bits (or amx has no amx_bf16), 1 when not (or base has no gemm_bf16_x16).
  int run(const CpuKernels& base, const CpuKernels& amx);

 private:
  static constexpr int64_t kInputs = 3 * kBF16TileK, kGroups = 3, kTokens = kAmxMaxTokens;
  size_t gb_ = packed_group_bytes(DType::BF16, kInputs);
  std::vector<uint8_t> w_;
  std::vector<float> x_;
  std::vector<uint16_t> tiles_;
  std::vector<float> want_, got_;
};

// Why AMX-INT8 is not used after run() returned `code` (≠ 0): "the AMX self-test's Q5_K results differ from the
// AVX-512 kernels'" (no type named for a code outside 1..amx_int8_entries().size()).
std::string amx_self_test_failure(int code);
// The type with index `running` in amx_int8_entries() ("" when out of range): the one a dead child was testing.
std::string_view amx_self_test_type(int running);

}  // namespace kvik
