#include "eval/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace kvik {

PerplexityWindows make_windows(const Tokenizer& tok, const std::string& text, int32_t ctx, int32_t chunks) {
  if (ctx < 4) fail("perplexity: --ctx must be at least 4 (got {})", ctx);
  PerplexityWindows w;
  w.tokens = tok.encode(text, tok.add_bos(), false);  // as common_tokenize(ctx, text, add_special = true)
  w.ctx = ctx;
  w.bos = tok.add_bos() ? tok.bos_id() : -1;
  const int64_t fit = static_cast<int64_t>(w.tokens.size()) / ctx;
  if (fit == 0) fail("perplexity: the text is {} tokens, fewer than one window of --ctx {}", w.tokens.size(), ctx);
  w.chunks = static_cast<int32_t>(chunks < 0 ? fit : std::min<int64_t>(chunks, fit));
  if (w.chunks == 0) fail("perplexity: --chunks must be at least 1");
  return w;
}

namespace {

// The flat batch of one forward pass: positions [p0, p1) of `n` windows, each window owning its own blocks.
struct PassBatch {
  std::vector<int32_t> ids, pos, qsl, seq_lens, tables, logits_rows;
  std::vector<int64_t> slots;
  int32_t blocks_per_window = 0;

  void build(const PerplexityWindows& w, int32_t win0, int32_t n, int32_t p0, int32_t p1, int32_t block_size) {
    ids.clear(), pos.clear(), slots.clear(), qsl.assign(1, 0), seq_lens.clear(), tables.clear(), logits_rows.clear();
    blocks_per_window = (w.ctx + block_size - 1) / block_size;
    for (int32_t s = 0; s < n; ++s) {
      const size_t start = static_cast<size_t>(win0 + s) * w.ctx;
      for (int32_t p = p0; p < p1; ++p) {
        // Window rows [first, ctx − 1) are scored; the last row predicts a token outside the window.
        if (p >= w.first() && p < w.ctx - 1) logits_rows.push_back(static_cast<int32_t>(ids.size()));
        ids.push_back(p == 0 && w.bos >= 0 ? w.bos : w.tokens[start + p]);
        pos.push_back(p);
        slots.push_back(static_cast<int64_t>(s * blocks_per_window + p / block_size) * block_size + p % block_size);
      }
      qsl.push_back(static_cast<int32_t>(ids.size()));
      seq_lens.push_back(p1);
      for (int32_t b = 0; b < blocks_per_window; ++b) tables.push_back(s * blocks_per_window + b);
    }
  }
  ForwardBatch view(const PerplexityOptions& opt) const {
    return ForwardBatch{ids,         pos, slots,       qsl, seq_lens, tables, blocks_per_window,
                        logits_rows, {},  opt.observe, {},  {},       {}};
  }
};

}  // namespace

void run_windows(LlamaModel& model, const PerplexityWindows& w, const PerplexityOptions& opt, int32_t begin,
                 int32_t end, const WindowSink& sink) {
  const int64_t V = model.config().vocab_size;
  const int32_t n_seq = windows_per_pass(opt);
  const int32_t step = std::max<int32_t>(1, std::min(opt.batch_tokens, w.ctx));  // positions per pass
  constexpr int32_t kBlock = 16;
  KvCacheTensors cache(model.config(), static_cast<int64_t>(n_seq) * ((w.ctx + kBlock - 1) / kBlock), kBlock,
                       opt.kv_dtype);
  const size_t window_floats = static_cast<size_t>(w.scored()) * V;
  std::vector<float> logits(static_cast<size_t>(n_seq) * window_floats);
  std::vector<float> pass_logits;
  PassBatch batch;
  for (int32_t win = begin; win < end; win += n_seq) {
    const int32_t n = std::min(n_seq, end - win);
    for (int32_t p0 = 0; p0 < w.ctx; p0 += step) {
      const int32_t p1 = std::min(w.ctx, p0 + step);
      batch.build(w, win, n, p0, p1, kBlock);
      if (p1 - p0 == w.ctx) {  // whole windows in one pass: their rows land in place
        model.forward(batch.view(opt), cache, logits.data());
        continue;
      }
      pass_logits.resize(batch.logits_rows.size() * V);
      model.forward(batch.view(opt), cache, pass_logits.data());
      // Rows come window by window; each window's scored rows of this pass continue where the last pass ended.
      const int32_t lo = std::max(p0, w.first()), hi = std::min(p1, w.ctx - 1);
      const int32_t per_window = std::max(0, hi - lo);
      for (int32_t s = 0; s < n; ++s)
        std::memcpy(&logits[s * window_floats + static_cast<size_t>(lo - w.first()) * V],
                    &pass_logits[static_cast<size_t>(s) * per_window * V], sizeof(float) * per_window * V);
    }
    for (int32_t s = 0; s < n; ++s) sink(win + s, &logits[s * window_floats]);
  }
}

double token_nll(const float* logits, int64_t n_vocab, int32_t target) {
  float max_logit = logits[0];
  for (int64_t i = 1; i < n_vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum_exp = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  return -(logits[target] - max_logit - std::log(sum_exp));
}

int32_t argmax(const float* logits, int64_t n_vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < n_vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

double NllSum::ppl() const { return count ? std::exp(sum / count) : 0; }

double NllSum::ppl_stderr() const {
  if (count < 2) return 0;
  const double mean = sum / count, var = sum2 / count - mean * mean;
  return var > 0 ? std::sqrt(var / (count - 1)) * ppl() : 0;
}

double KlStats::delta_p_rms() const { return count ? std::sqrt(sum_dp2 / count) : 0; }

// llama.cpp keeps the reference's log-probabilities of one row as 16-bit steps above min(logit) (clamped to
// max − 16), scaled so that the largest is 65535; values below the floor become the floor.
std::vector<uint16_t> encode_reference_row(const float* logits, int64_t n_vocab) {
  float max_logit = logits[0], min_logit = logits[0];
  for (int64_t i = 1; i < n_vocab; ++i)
    max_logit = std::max(max_logit, logits[i]), min_logit = std::min(min_logit, logits[i]);
  min_logit = std::max(min_logit, max_logit - 16);
  double sum_exp = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - max_logit);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  const float head[2] = {(max_logit - min_logit) / 65535.f, min_logit - max_logit - log_sum_exp};
  std::vector<uint16_t> row(4 + n_vocab, 0);
  std::memcpy(row.data(), head, sizeof head);
  if (head[0] != 0) {
    const float inv = 1 / head[0];
    for (int64_t i = 0; i < n_vocab; ++i)
      if (logits[i] > min_logit) row[4 + i] = static_cast<uint16_t>(std::nearbyint(inv * (logits[i] - min_logit)));
  }
  return row;
}

void add_kl_row(KlStats& s, const float* logits, int64_t n_vocab, const uint16_t* reference, int32_t target) {
  const int32_t top = argmax(logits, n_vocab);
  double sum_exp = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - logits[top]);
  const float log_sum_exp = static_cast<float>(std::log(sum_exp));
  float head[2];
  std::memcpy(head, reference, sizeof head);
  const uint16_t* ref = reference + 4;
  const float nll = logits[top] + log_sum_exp - logits[target];
  const float nll_ref = -(head[0] * ref[target] + head[1]);
  s.nll.add(nll);
  const float log_norm = logits[top] + log_sum_exp;
  double kld = 0;
  int64_t top_ref = 0;
  float top_ref_lp = 0;
  for (int64_t i = 0; i < n_vocab; ++i) {
    const float lp_ref = head[0] * ref[i] + head[1];
    if (i == 0 || lp_ref > top_ref_lp) top_ref_lp = lp_ref, top_ref = i;
    if (lp_ref > -16.f) kld += std::exp(lp_ref) * (lp_ref - logits[i] + log_norm);
  }
  s.sum_kld += kld;
  s.same_top += top == top_ref;
  const float dp = std::exp(-nll) - std::exp(-nll_ref);
  s.sum_dp2 += static_cast<double>(dp) * dp;
  ++s.count;
}

namespace {

// Per-row work of one window on the thread pool, summed in row order (the same result whatever the threads).
template <typename Row, typename Acc>
void each_row(const PerplexityWindows& w, Acc& acc, const Row& row_fn) {
  std::vector<Acc> parts(static_cast<size_t>(w.scored()));
  ThreadPool::global().parallel_for_dynamic(w.scored(), 8, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) row_fn(static_cast<int32_t>(r), parts[r]);
  });
  for (const Acc& p : parts) acc.merge(p);
}

}  // namespace

PerplexityResult perplexity(LlamaModel& model, const PerplexityWindows& w, const PerplexityOptions& opt,
                            LlamaModel* reference) {
  const int64_t V = model.config().vocab_size;
  if (reference && reference->config().vocab_size != V)
    fail("perplexity: the reference model's vocabulary ({}) differs from the model's ({})",
         reference->config().vocab_size, V);
  struct Acc {
    NllSum nll;
    KlStats kl;
    void merge(const Acc& o) {
      nll.sum += o.nll.sum, nll.sum2 += o.nll.sum2, nll.count += o.nll.count;
      kl.nll.sum += o.kl.nll.sum, kl.nll.sum2 += o.kl.nll.sum2, kl.nll.count += o.kl.nll.count;
      kl.sum_kld += o.kl.sum_kld, kl.sum_dp2 += o.kl.sum_dp2, kl.same_top += o.kl.same_top, kl.count += o.kl.count;
    }
  } total;
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t group = reference ? windows_per_pass(opt) : w.chunks;
  std::vector<std::vector<uint16_t>> ref_rows;  // the reference's encoded rows of the current group
  for (int32_t g = 0; g < w.chunks; g += group) {
    const int32_t end = std::min(w.chunks, g + group);
    if (reference) {
      ref_rows.assign(static_cast<size_t>(end - g) * w.scored(), {});
      run_windows(*reference, w, opt, g, end, [&](int32_t win, const float* logits) {
        ThreadPool::global().parallel_for_dynamic(w.scored(), 8, [&](int64_t a, int64_t b) {
          for (int64_t r = a; r < b; ++r)
            ref_rows[static_cast<size_t>(win - g) * w.scored() + r] = encode_reference_row(logits + r * V, V);
        });
      });
    }
    run_windows(model, w, opt, g, end, [&](int32_t win, const float* logits) {
      each_row(w, total, [&](int32_t r, Acc& a) {
        if (reference)
          add_kl_row(a.kl, logits + r * V, V, ref_rows[static_cast<size_t>(win - g) * w.scored() + r].data(),
                     w.target(win, r));
        else
          a.nll.add(token_nll(logits + r * V, V, w.target(win, r)));
      });
    });
  }
  PerplexityResult res;
  const NllSum& nll = reference ? total.kl.nll : total.nll;
  res.ppl = nll.ppl();
  res.ppl_stderr = nll.ppl_stderr();
  res.tokens = nll.count;
  res.chunks = w.chunks;
  if (reference) {
    res.kld_mean = total.kl.kld_mean();
    res.top1_agreement = total.kl.top1_agreement();
    res.delta_p_rms = total.kl.delta_p_rms();
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.evaluated_tokens = static_cast<int64_t>(w.chunks) * w.ctx;
  return res;
}

}  // namespace kvik
