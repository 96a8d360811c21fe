// Flash-decoding (paged_attention.h, set_split_attention): a lone long decode split across threads by key range
// gives the unsplit result bit for bit, for every KV cache type, MQA and GQA, head sizes 64 and 128, sliding
// windows, Gemma's soft cap, context lengths around the split threshold and past 8k, and batches where only some
// tasks are split; and the split really happens (the counter moves) when the tasks are fewer than the threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/paged_attention.h"

using namespace kvik;

namespace {

struct Case {
  DType kv = DType::F16;
  int64_t n_h = 8, n_kv = 1, d = 64;
  std::vector<int32_t> lens;  // one decode row per request, at position len − 1
  int32_t window = 0;
  float softcap = 0.0f, v_scale = 1.0f;
};

// Runs the decode rows of c over a shuffled paged cache filled with random K/V; split on or off.
std::vector<float> decode(const Case& c, bool split) {
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int32_t bs = 16, R = static_cast<int32_t>(c.lens.size());
  const int32_t max_len = *std::max_element(c.lens.begin(), c.lens.end()), mb = (max_len + bs - 1) / bs;
  std::vector<int32_t> tables(static_cast<size_t>(R) * mb);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng);
  const int64_t kv_dim = c.n_kv * c.d, row = kv_row_bytes(c.kv, kv_dim), slots = int64_t{R} * mb * bs;
  std::vector<uint8_t> kc(static_cast<size_t>(slots * row)), vc(kc.size());
  std::vector<float> kr(kv_dim), vr(kv_dim);
  for (int64_t s = 0; s < slots; ++s) {
    for (auto& x : kr) x = g(rng);
    for (auto& x : vr) x = g(rng);
    write_kv(kr.data(), vr.data(), &s, 1, kv_dim, kc.data(), vc.data(), c.kv, 1.0f, c.v_scale);
  }
  std::vector<float> q(static_cast<size_t>(R * c.n_h * c.d)), out(q.size(), -1.0f);
  for (auto& x : q) x = g(rng);
  std::vector<int32_t> qsl(R + 1), pos(R);
  std::iota(qsl.begin(), qsl.end(), 0);
  for (int32_t r = 0; r < R; ++r) pos[r] = c.lens[r] - 1;
  PagedAttentionArgs a;
  a.q = q.data(), a.k_cache = kc.data(), a.v_cache = vc.data(), a.kv_dtype = c.kv, a.out = out.data();
  a.v_scale = c.v_scale;
  a.num_reqs = R, a.query_start_loc = qsl.data(), a.seq_lens = c.lens.data(), a.positions = pos.data();
  a.block_tables = tables.data(), a.max_blocks_per_seq = mb, a.block_size = bs;
  a.n_heads = c.n_h, a.n_kv_heads = c.n_kv, a.head_dim = c.d, a.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  a.sliding_window = c.window, a.softcap = c.softcap;
  set_split_attention(split);
  paged_attention(a);
  set_split_attention(true);
  return out;
}

class SplitAttention : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { ThreadPool::global().set_num_threads(4); }
  void TearDown() override { ThreadPool::global().set_num_threads(0); }
};

TEST_P(SplitAttention, SplitDecodeEqualsUnsplitBitForBit) {
  const DType kv = GetParam();
  const float v_scale = kv == DType::F8_E4M3 ? 0.5f : 1.0f;
  std::vector<Case> cases = {
      {kv, 8, 1, 64, {1023}},            // below the threshold: not split
      {kv, 8, 1, 64, {1024}},            // at it
      {kv, 8, 1, 128, {3001}},           // MQA, d_h 128, a partial last chunk
      {kv, 8, 2, 64, {8200}},            // GQA 4, past 8k
      {kv, 4, 1, 64, {5000}, 2048},      // sliding window: the keys start mid-chunk
      {kv, 8, 2, 64, {4100}, 0, 30.0f},  // Gemma 2's soft cap
      {kv, 8, 1, 64, {6000, 300}},       // a batch: one task split, one short one run whole
  };
  const int64_t split_before = split_attention_tasks();
  for (Case& c : cases) {
    c.v_scale = v_scale;
    const std::vector<float> whole = decode(c, false), split = decode(c, true);
    ASSERT_EQ(0, std::memcmp(whole.data(), split.data(), whole.size() * sizeof(float)))
        << dtype_name(kv) << " n_kv " << c.n_kv << " d " << c.d << " len " << c.lens[0] << " window " << c.window;
    for (float x : split) ASSERT_TRUE(std::isfinite(x));
  }
  // Six cases have a task of 1024 keys or more among fewer tasks than 4 threads.
  EXPECT_EQ(split_attention_tasks() - split_before, 1 + 1 + 2 + 1 + 2 + 1);
}

TEST(SplitAttentionThreads, ManyTasksOrOneThreadAreNotSplit) {
  ThreadPool::global().set_num_threads(2);
  const int64_t before = split_attention_tasks();
  decode({DType::F16, 8, 2, 64, {4096}}, true);  // 2 KV heads: 2 tasks for 2 threads, enough without a split
  EXPECT_EQ(split_attention_tasks(), before);
  decode({DType::F16, 8, 1, 64, {4096}}, true);
  EXPECT_EQ(split_attention_tasks(), before + 1);
  ThreadPool::global().set_num_threads(1);
  decode({DType::F16, 8, 1, 64, {4096}}, true);
  EXPECT_EQ(split_attention_tasks(), before + 1);
  ThreadPool::global().set_num_threads(0);
}

INSTANTIATE_TEST_SUITE_P(KvTypes, SplitAttention,
                         ::testing::Values(DType::F32, DType::F16, DType::Q8_0, DType::F8_E4M3),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
