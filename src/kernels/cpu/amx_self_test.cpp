#include "kernels/cpu/amx_self_test.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <random>

#include "core/fp16.h"
#include "tensor/k_quants.h"

namespace kvik {

namespace {

constexpr std::array<AmxInt8Entry, 9> kEntries = {{
    {DType::Q8_0, &CpuKernels::amx_q8_0, &CpuKernels::gemm_q8_0_x16},
    {DType::Q4_0, &CpuKernels::amx_q4_0, &CpuKernels::gemm_q4_0_x16},
    {DType::IQ4_NL, &CpuKernels::amx_iq4_nl, &CpuKernels::gemm_iq4_nl_x16},
    {DType::Q5_0, &CpuKernels::amx_q5_0, &CpuKernels::gemm_q5_0_x16},
    {DType::Q4_1, &CpuKernels::amx_q4_1, &CpuKernels::gemm_q4_1_x16},
    {DType::Q5_1, &CpuKernels::amx_q5_1, &CpuKernels::gemm_q5_1_x16},
    {DType::Q4_K, nullptr, nullptr, &CpuKernels::amx_q4_k, &CpuKernels::gemm_q4_k_x16},
    {DType::Q5_K, nullptr, nullptr, &CpuKernels::amx_q5_k, &CpuKernels::gemm_q5_k_x16},
    {DType::Q6_K, nullptr, nullptr, &CpuKernels::amx_q6_k, &CpuKernels::gemm_q6_k_x16},
}};

}  // namespace

std::span<const AmxInt8Entry> amx_int8_entries() { return kEntries; }

struct AmxInt8SelfTest::Case {
  const AmxInt8Entry* e;
  int64_t nb;  // blocks (or super-blocks) per row
  size_t gb;   // bytes per packed group
  PackedBuffer w;
  std::vector<int8_t> qs;  // ActQ8S
  std::vector<float> d;
  std::vector<int32_t> sums;
  std::vector<BlockQ8_K> q8k;  // ActQ8KS
  std::vector<int16_t> sums32;
  std::vector<float> want, got;  // [kAmxMaxTokens][kGroups · 16]

  Case(const AmxInt8Entry& entry, uint32_t seed);
  ActQ8S s8(int64_t t) const { return {qs.data() + t * nb * kQK8_0, d.data() + t * nb, sums.data() + t * nb, nb}; }
  ActQ8KS k(int64_t t) const { return {q8k.data() + t * nb, sums32.data() + t * nb * 8, nb}; }
};

AmxInt8SelfTest::Case::Case(const AmxInt8Entry& entry, uint32_t seed) : e(&entry) {
  const DType t = entry.type;
  const bool k_quant = entry.amx_k != nullptr;
  nb = k_quant ? kSuperBlocks : kBlocks;
  const int64_t cols = nb * (k_quant ? kQK_K : kQK8_0), rows = kGroups * kPackRows, R = kAmxMaxTokens;
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(std::max(rows, R) * cols));
  // The weight: 16 rows quantized to the type (IQ4_NL's and the K-quants' scale searches take most of the start-up
  // cost: a few ms for 16 rows), group j holding them rotated by 5j (each group's outputs differ), then packed.
  for (auto& v : x) v = g(rng);
  const size_t rb = *row_bytes(t, cols);
  std::vector<uint8_t> rows16(rb * kPackRows), plain(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < kPackRows; ++r) quantize_row(t, x.data() + r * cols, rows16.data() + rb * r, cols);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(plain.data() + rb * r, rows16.data() + rb * ((r + 5 * (r / kPackRows)) % kPackRows), rb);
  const WeightMatrix m{t, rows, cols, plain.data(), rb};
  gb = packed_group_bytes(t, cols);
  w = allocate_packed(gb * kGroups);
  for (int64_t gi = 0; gi < kGroups; ++gi) pack_group(m, gi, w.get() + gb * gi);
  // The activations, quantized as the engine quantizes them for this type's kernels.
  for (auto& v : x) v = g(rng);
  if (k_quant) {
    q8k.resize(R * nb), sums32.resize(R * nb * 8);
    for (int64_t r = 0; r < R; ++r) quantize_row_q8_k(x.data() + r * cols, q8k.data() + r * nb, cols);
    q8_k_sums32(q8k.data(), sums32.data(), R * nb);
  } else {
    qs.resize(R * cols), d.resize(R * nb), sums.resize(R * nb);
    for (int64_t r = 0; r < R; ++r)
      quantize_act_q8s_ref(x.data() + r * cols, qs.data() + r * cols, d.data() + r * nb, sums.data() + r * nb, cols);
  }
  want.resize(R * kGroups * kPackRows), got.resize(want.size());
}

AmxInt8SelfTest::AmxInt8SelfTest() {
  cases_.reserve(kEntries.size());
  for (size_t i = 0; i < kEntries.size(); ++i) cases_.emplace_back(kEntries[i], static_cast<uint32_t>(101 + i));
}

AmxInt8SelfTest::~AmxInt8SelfTest() = default;

int AmxInt8SelfTest::run(const CpuKernels& base, const CpuKernels& amx, volatile int* running) {
  const int64_t R = kAmxMaxTokens, ys = kGroups * kPackRows;
  for (size_t i = 0; i < cases_.size(); ++i) {
    Case& c = cases_[i];
    const AmxInt8Entry& e = *c.e;
    const bool k_quant = e.amx_k != nullptr;
    if (k_quant ? !(amx.*e.amx_k) : !(amx.*e.amx)) continue;  // no AMX entry: the type never runs on tiles
    if (k_quant ? !(base.*e.x16_k) : !(base.*e.x16)) return static_cast<int>(i) + 1;
    if (running) *running = static_cast<int>(i);
    // A NaN no kernel writes: an output the AMX kernel leaves alone cannot match.
    std::fill(c.got.begin(), c.got.end(), std::numeric_limits<float>::quiet_NaN());
    for (int64_t g = 0; g < kGroups; ++g)
      for (int64_t t = 0; t < R; t += kPackMaxTokens) {  // the x16 kernels take at most kPackMaxTokens tokens a call
        const uint8_t* grp = c.w.get() + c.gb * g;
        float* y = c.want.data() + t * ys + kPackRows * g;
        const int64_t r = std::min(kPackMaxTokens, R - t);
        k_quant ? (base.*e.x16_k)(grp, c.nb, c.k(t), r, y, ys) : (base.*e.x16)(grp, c.nb, c.s8(t), r, y, ys);
      }
    if (k_quant)
      (amx.*e.amx_k)(c.w.get(), kGroups, c.gb, c.nb, c.k(0), R, c.got.data(), ys);
    else
      (amx.*e.amx)(c.w.get(), kGroups, c.gb, c.nb, c.s8(0), R, c.got.data(), ys);
    if (std::memcmp(c.want.data(), c.got.data(), c.want.size() * sizeof(float)) != 0) return static_cast<int>(i) + 1;
  }
  return 0;
}

AmxBf16SelfTest::AmxBf16SelfTest()
    : w_(gb_ * kGroups),
      x_(kTokens * kInputs),
      tiles_(kTokens * bf16_blocks(kInputs) * kBF16TileK),
      want_(kTokens * kGroups * kPackRows),
      got_(want_.size()) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> v(-2.0f, 2.0f);
  for (int64_t g = 0; g < kGroups; ++g)
    for (int i = 0; i < kPackRows; ++i)
      for (int64_t k = 0; k < kInputs; ++k) {
        const uint16_t h = f32_to_bf16(v(rng));
        std::memcpy(&w_[gb_ * g + 2 * packed_bf16_index(k, i)], &h, 2);
      }
  for (auto& f : x_) f = bf16_to_f32(f32_to_bf16(v(rng)));
  for (int64_t t = 0; t < kTokens; ++t)
    bf16_pair_activations(&x_[t * kInputs], kInputs, false, &tiles_[t * bf16_blocks(kInputs) * kBF16TileK]);
}

int AmxBf16SelfTest::run(const CpuKernels& base, const CpuKernels& amx) {
  if (!amx.amx_bf16) return 0;
  if (!base.gemm_bf16_x16) return 1;
  const int64_t ys = kGroups * kPackRows;
  std::fill(got_.begin(), got_.end(), std::numeric_limits<float>::quiet_NaN());
  for (int64_t t = 0; t < kTokens; t += kPackMaxTokens)  // the x16 kernels take at most kPackMaxTokens tokens a call
    base.gemm_bf16_x16(w_.data(), kGroups, gb_, kInputs, x_.data() + t * kInputs, kInputs,
                       std::min(kPackMaxTokens, kTokens - t), want_.data() + t * ys, ys);
  amx.amx_bf16(w_.data(), kGroups, gb_, bf16_blocks(kInputs), tiles_.data(), kTokens, got_.data(), ys);
  return std::memcmp(want_.data(), got_.data(), want_.size() * sizeof(float)) == 0 ? 0 : 1;
}

std::string_view amx_self_test_type(int running) {
  if (running < 0 || running >= static_cast<int>(kEntries.size())) return {};
  return dtype_name(kEntries[static_cast<size_t>(running)].type);
}

std::string amx_self_test_failure(int code) {
  const std::string_view type = amx_self_test_type(code - 1);
  return "the AMX self-test's " + (type.empty() ? std::string() : std::string(type) + " ") +
         "results differ from the AVX-512 kernels'";
}

}  // namespace kvik
