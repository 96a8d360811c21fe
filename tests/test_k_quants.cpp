// K-quants (Q4_K, Q5_K, Q6_K, Q8_K): bit-exactness with llama.cpp's reference quantizers and dequantizers, hand-made
// blocks whose values are worked out from the layout by hand, random blocks, and the reference dot products.
//
// tests/data/kquants_llamacpp.bin comes from llama.cpp itself (libggml-base.so of node-llama-cpp 3.21.1):
//   ninja -C build kvik_peer_tool && build/kvik_peer_tool kquant-fixture
//   tests/data/kquants_llamacpp.bin
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tensor/dtype.h"
#include "tensor/k_quants.h"

using namespace kvik;

namespace {

struct LlamaCppCase {
  DType type;
  std::vector<uint8_t> quantized;
  std::vector<float> dequantized;
};
struct LlamaCppFixture {
  std::vector<float> input;
  std::vector<LlamaCppCase> cases;
};

LlamaCppFixture read_fixture() {
  std::ifstream in(KVIK_SOURCE_DIR "/tests/data/kquants_llamacpp.bin", std::ios::binary);
  if (!in)
    throw std::runtime_error(
        "tests/data/kquants_llamacpp.bin missing (kvik_peer_tool kquant-fixture makes it, tools/peer_tool.cpp)");
  auto u32 = [&] {
    uint32_t v;
    in.read(reinterpret_cast<char*>(&v), 4);
    return v;
  };
  char magic[4];
  in.read(magic, 4);
  if (std::memcmp(magic, "KVKQ", 4) != 0) throw std::runtime_error("bad fixture magic");
  LlamaCppFixture f;
  f.input.resize(u32());
  in.read(reinterpret_cast<char*>(f.input.data()), static_cast<std::streamsize>(f.input.size() * 4));
  for (int i = 0; i < 4; ++i) {
    LlamaCppCase c;
    c.type = static_cast<DType>(u32());
    c.quantized.resize(u32());
    in.read(reinterpret_cast<char*>(c.quantized.data()), static_cast<std::streamsize>(c.quantized.size()));
    c.dequantized.resize(f.input.size());
    in.read(reinterpret_cast<char*>(c.dequantized.data()), static_cast<std::streamsize>(f.input.size() * 4));
    f.cases.push_back(std::move(c));
  }
  if (!in) throw std::runtime_error("truncated fixture");
  return f;
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

TEST(KQuants, ReferenceQuantizersAreBitExactWithLlamaCpp) {
  const LlamaCppFixture f = read_fixture();
  const int64_t n = static_cast<int64_t>(f.input.size());
  for (const auto& c : f.cases) {
    std::vector<uint8_t> q(c.quantized.size(), 0);
    quantize_row(c.type, f.input.data(), q.data(), n);
    if (c.type == DType::Q8_K) {
      // llama.cpp leaves bsums of an all-zero block unwritten; kvik writes zeros. Compare d and qs everywhere.
      for (size_t b = 0; b < q.size() / sizeof(BlockQ8_K); ++b)
        EXPECT_EQ(0, std::memcmp(q.data() + b * sizeof(BlockQ8_K), c.quantized.data() + b * sizeof(BlockQ8_K),
                                 offsetof(BlockQ8_K, bsums)))
            << "q8_K block " << b;
    } else {
      for (size_t b = 0; b < q.size() / traits(c.type).block_bytes; ++b) {
        const size_t bb = traits(c.type).block_bytes;
        EXPECT_EQ(0, std::memcmp(q.data() + b * bb, c.quantized.data() + b * bb, bb))
            << dtype_name(c.type) << " block " << b;
      }
    }
  }
}

TEST(KQuants, DequantizationIsBitExactWithLlamaCpp) {
  const LlamaCppFixture f = read_fixture();
  const int64_t n = static_cast<int64_t>(f.input.size());
  for (const auto& c : f.cases) {
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row(c.type, c.quantized.data(), y.data(), n);
    EXPECT_EQ(bits(y), bits(c.dequantized)) << dtype_name(c.type);
  }
}

// Scales and mins chosen so that sub-blocks 4..7 use the two high bits packed into bytes 0..7.
void pack_scales(const int* sc, const int* m, uint8_t* s) {
  std::memset(s, 0, kKScaleBytes);
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(m[j] | ((m[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

TEST(KQuants, HandMadeQ4KAndQ5KBlocksDequantizeAsTheLayoutSays) {
  const int sc[8] = {1, 7, 15, 16, 33, 47, 62, 63}, m[8] = {0, 63, 5, 17, 32, 48, 1, 60};
  BlockQ4_K b4{};
  BlockQ5_K b5{};
  b4.d = b5.d = f32_to_fp16(0.5f);
  b4.dmin = b5.dmin = f32_to_fp16(0.25f);
  pack_scales(sc, m, b4.scales);
  pack_scales(sc, m, b5.scales);
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (e * 7 + e / 32) % 32;  // 5-bit levels; Q4_K keeps the low 4 bits
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
      b4.qs[32 * c + l] = b5.qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      b5.qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  float y4[256], y5[256];
  dequantize_row(DType::Q4_K, &b4, y4, 256);
  dequantize_row(DType::Q5_K, &b5, y5, 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_EQ(y4[e], 0.5f * sc[j] * (q[e] & 15) - 0.25f * m[j]) << e;
    EXPECT_EQ(y5[e], 0.5f * sc[j] * q[e] - 0.25f * m[j]) << e;
  }
}

TEST(KQuants, HandMadeQ6KBlockDequantizesAsTheLayoutSays) {
  BlockQ6_K b{};
  b.d = f32_to_fp16(0.125f);
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(j % 2 ? -8 * j - 1 : 8 * j);
  int q[256];
  for (int e = 0; e < 256; ++e) q[e] = (e * 5 + 3) % 64;
  // Element 128h + 32k + l: low 4 bits in ql[64h + l + 32(k%2)] (low nibble for k < 2), high 2 bits at 2k of qh[32h +
  // l].
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    uint8_t& lo = b.ql[64 * h + l + 32 * (k % 2)];
    lo = static_cast<uint8_t>(lo | ((q[e] & 15) << (k < 2 ? 0 : 4)));
    b.qh[32 * h + l] = static_cast<uint8_t>(b.qh[32 * h + l] | ((q[e] >> 4) << (2 * k)));
  }
  float y[256];
  dequantize_row(DType::Q6_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.125f * b.scales[e / 16] * (q[e] - 32)) << e;
}

TEST(KQuants, RandomBlocksRoundTripWithinTheFormatsError) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int64_t n = 256 * 64;
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = g(rng);
  // RMS error relative to RMS(x) = 1: ~ step/√12 with step ≈ range/levels per sub-block.
  const std::pair<DType, double> bounds[] = {
      {DType::Q4_K, 0.12}, {DType::Q5_K, 0.06}, {DType::Q6_K, 0.03}, {DType::Q8_K, 0.01}};
  for (auto [t, bound] : bounds) {
    std::vector<uint8_t> q(*row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    double se = 0;
    for (int64_t i = 0; i < n; ++i) se += (x[i] - y[i]) * double(x[i] - y[i]);
    EXPECT_LT(std::sqrt(se / n), bound) << dtype_name(t);
  }
}

TEST(KQuants, RandomBytesDequantizeAsTheElementAccessorsSay) {
  std::mt19937 rng(11);
  std::vector<uint8_t> raw(sizeof(BlockQ6_K) * 4);
  for (auto& v : raw) v = static_cast<uint8_t>(rng());
  auto* b4 = reinterpret_cast<BlockQ4_K*>(raw.data());
  auto* b5 = reinterpret_cast<BlockQ5_K*>(raw.data());
  auto* b6 = reinterpret_cast<BlockQ6_K*>(raw.data());
  b4->d = f32_to_fp16(0.01f), b4->dmin = f32_to_fp16(0.02f);  // keep the scales finite
  const float d = fp16_to_f32(b4->d), dmin = fp16_to_f32(b4->dmin);
  float y[256];
  dequantize_row(DType::Q4_K, b4, y, 256);
  for (int e = 0; e < 256; ++e) {
    uint8_t sc, m;
    k_scale_min(e / 32, b4->scales, sc, m);
    EXPECT_EQ(y[e], d * sc * q4_k_quant(*b4, e) - dmin * m) << e;
  }
  dequantize_row(DType::Q5_K, b5, y, 256);
  for (int e = 0; e < 256; ++e) {
    uint8_t sc, m;
    k_scale_min(e / 32, b5->scales, sc, m);
    EXPECT_EQ(y[e], d * sc * q5_k_quant(*b5, e) - dmin * m) << e;
  }
  b6->d = f32_to_fp16(0.01f);
  dequantize_row(DType::Q6_K, b6, y, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], d * b6->scales[e / 16] * (q6_k_quant(*b6, e) - 32)) << e;
}

// The reference dot products equal Σ dequant(w)·dequant(x) up to float rounding.
TEST(KQuants, ReferenceDotsMatchDequantizedDot) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int64_t nb = 8, n = nb * kQK_K;
  std::vector<float> wf(n), xf(n), wd(n), xd(n);
  for (auto& v : wf) v = g(rng);
  for (auto& v : xf) v = g(rng);
  std::vector<BlockQ8_K> xq(nb);
  quantize_row(DType::Q8_K, xf.data(), xq.data(), n);
  dequantize_row(DType::Q8_K, xq.data(), xd.data(), n);
  const CpuKernels& k = generic_kernels();
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    std::vector<uint8_t> wq(*row_bytes(t, n));
    quantize_row(t, wf.data(), wq.data(), n);
    dequantize_row(t, wq.data(), wd.data(), n);
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) ref += double(wd[i]) * xd[i], mag += std::fabs(double(wd[i]) * xd[i]);
    const float got = t == DType::Q4_K   ? k.dot_q4_k(reinterpret_cast<const BlockQ4_K*>(wq.data()), xq.data(), nb)
                      : t == DType::Q5_K ? k.dot_q5_k(reinterpret_cast<const BlockQ5_K*>(wq.data()), xq.data(), nb)
                                         : k.dot_q6_k(reinterpret_cast<const BlockQ6_K*>(wq.data()), xq.data(), nb);
    EXPECT_NEAR(got, ref, 1e-5 * mag) << dtype_name(t);
  }
}

}  // namespace
