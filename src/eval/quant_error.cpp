#include "eval/quant_error.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "tensor/dtype.h"

namespace kvik {

const float kNf4Codebook[16] = {-1.0f,
                                -0.6961928009986877f,
                                -0.5250730514526367f,
                                -0.39491748809814453f,
                                -0.28444138169288635f,
                                -0.18477343022823334f,
                                -0.09105003625154495f,
                                0.0f,
                                0.07958029955625534f,
                                0.16093020141124725f,
                                0.24611230194568634f,
                                0.33791524171829224f,
                                0.44070982933044434f,
                                0.5626170039176941f,
                                0.7229568362236023f,
                                1.0f};

namespace {

// Symmetric absmax: x ≈ s · round(x / s), s = max|x| / qmax over each group of `group` consecutive elements
// (the whole tensor, one row, or a slice of a row).
void absmax_group(float* x, int64_t n, int qmax) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (amax == 0) return;
  const float s = amax / qmax, inv = 1 / s;
  for (int64_t i = 0; i < n; ++i) x[i] = s * std::clamp(std::nearbyint(x[i] * inv), float(-qmax), float(qmax));
}

void nf4_group(float* x, int64_t n) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (amax == 0) return;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] / amax;
    int best = 0;
    for (int c = 1; c < 16; ++c)
      if (std::fabs(v - kNf4Codebook[c]) < std::fabs(v - kNf4Codebook[best])) best = c;
    x[i] = kNf4Codebook[best] * amax;
  }
}

// Each row cut into groups of `group` (the last may be shorter), rows in parallel.
template <typename F>
void by_row_groups(float* w, int64_t rows, int64_t cols, int64_t group, const F& f) {
  ThreadPool::global().parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < cols; c += group) f(w + r * cols + c, std::min(group, cols - c));
  });
}

FakeQuantScheme absmax_scheme(std::string name, std::string desc, int bits, int64_t group) {
  const int qmax = (1 << (bits - 1)) - 1;
  const double bpw = bits + (group > 0 ? 16.0 / std::min<int64_t>(group, 4096) : 0.0);
  return {std::move(name), std::move(desc), bpw, 1, [qmax, group](float* w, int64_t rows, int64_t cols) {
            if (group == 0)
              absmax_group(w, rows * cols, qmax);  // one scale for the whole tensor
            else
              by_row_groups(w, rows, cols, group, [qmax](float* x, int64_t n) { absmax_group(x, n, qmax); });
          }};
}

FakeQuantScheme gguf_scheme(DType t) {
  const DTypeTraits& tr = traits(t);
  const double bpw = 8.0 * static_cast<double>(tr.block_bytes) / static_cast<double>(tr.block_size);
  return {std::string(tr.name), "GGUF " + std::string(tr.name) + " (llama.cpp's quantizer, no imatrix)", bpw,
          tr.block_size, [t](float* w, int64_t rows, int64_t cols) {
            ThreadPool::global().parallel_for(rows, [&](int64_t r0, int64_t r1) {
              std::vector<uint8_t> q(*row_bytes(t, cols));
              for (int64_t r = r0; r < r1; ++r) {
                quantize_row(t, w + r * cols, q.data(), cols);
                dequantize_row(t, q.data(), w + r * cols, cols);
              }
            });
          }};
}

}  // namespace

std::vector<FakeQuantScheme> fake_quant_schemes() {
  std::vector<FakeQuantScheme> s = {
      absmax_scheme("int8 per-tensor", "absmax, one scale for the whole matrix", 8, 0),
      absmax_scheme("int8 per-row", "absmax, one scale per output row", 8, 1 << 30),
      absmax_scheme("int4 per-tensor", "absmax to -7..7, one scale for the whole matrix", 4, 0),
      absmax_scheme("int4 per-row", "absmax to -7..7, one scale per output row", 4, 1 << 30),
      absmax_scheme("int4 group-128", "absmax to -7..7, one scale per 128 weights of a row", 4, 128),
      {"nf4 group-64", "QLoRA's NF4 codebook, absmax per 64 weights", 4.25, 1,
       [](float* w, int64_t rows, int64_t cols) { by_row_groups(w, rows, cols, 64, nf4_group); }},
  };
  // The GGUF types, largest first.
  for (DType t : {DType::Q8_0, DType::Q6_K, DType::Q5_K, DType::Q4_K, DType::Q4_0}) s.push_back(gguf_scheme(t));
  return s;
}

namespace {

// Per layer: Σx², count and max |x| per dimension of the residual stream.
struct OutlierStats {
  int64_t d = 0;
  std::vector<double> sum_sq;
  std::vector<int64_t> count;
  std::vector<float> max_abs;  // [L, d]
  void observe(int64_t layer, const float* x, int64_t T) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < d; ++i) {
        const float v = x[t * d + i];
        sum_sq[layer] += static_cast<double>(v) * v;
        max_abs[layer * d + i] = std::max(max_abs[layer * d + i], std::fabs(v));
      }
    count[layer] += T * d;
  }
  std::vector<LayerOutliers> report(double threshold) const {
    std::vector<LayerOutliers> out;
    for (size_t l = 0; l < sum_sq.size(); ++l) {
      LayerOutliers lo;
      lo.layer = static_cast<int64_t>(l);
      lo.rms = count[l] ? std::sqrt(sum_sq[l] / count[l]) : 0;
      for (int64_t i = 0; i < d; ++i)
        if (lo.rms > 0 && max_abs[l * d + i] > threshold * lo.rms) lo.dims.emplace_back(i, max_abs[l * d + i] / lo.rms);
      std::sort(lo.dims.begin(), lo.dims.end(), [](auto& a, auto& b) { return a.second > b.second; });
      out.push_back(std::move(lo));
    }
    return out;
  }
};

// PPL of `model` on the windows and, when `base_top` is given, the share of scored rows whose argmax equals it;
// with `record_top`, the argmax of every scored row is stored there instead.
std::pair<NllSum, int64_t> score(LlamaModel& model, const PerplexityWindows& w, const PerplexityOptions& opt,
                                 const std::vector<int32_t>* base_top, std::vector<int32_t>* record_top) {
  const int64_t V = model.config().vocab_size;
  NllSum total;
  int64_t same = 0;
  std::vector<double> nll(w.scored());
  std::vector<int32_t> top(w.scored());
  run_windows(model, w, opt, 0, w.chunks, [&](int32_t win, const float* logits) {
    ThreadPool::global().parallel_for_dynamic(w.scored(), 8, [&](int64_t a, int64_t b) {
      for (int64_t r = a; r < b; ++r) {
        nll[r] = token_nll(logits + r * V, V, w.target(win, static_cast<int32_t>(r)));
        top[r] = argmax(logits + r * V, V);
      }
    });
    for (int32_t r = 0; r < w.scored(); ++r) {
      total.add(nll[r]);
      const size_t at = static_cast<size_t>(win) * w.scored() + r;
      if (record_top) (*record_top)[at] = top[r];
      if (base_top) same += (*base_top)[at] == top[r];
    }
  });
  return {total, same};
}

}  // namespace

QuantErrorReport quant_error(const std::function<std::unique_ptr<LlamaModel>()>& load, const PerplexityWindows& w,
                             const PerplexityOptions& opt, const std::vector<std::string>& only) {
  QuantErrorReport rep;
  std::vector<int32_t> base_top(static_cast<size_t>(w.chunks) * w.scored());
  {
    auto base = load();
    OutlierStats os;
    os.d = base->config().dim;
    os.sum_sq.assign(base->config().n_layers, 0.0);
    os.count.assign(base->config().n_layers, 0);
    os.max_abs.assign(base->config().n_layers * os.d, 0.0f);
    PerplexityOptions observed = opt;  // stream layer ℓ ≥ 1 is the output of block ℓ − 1
    observed.observe = [&os](int32_t layer, const float* x, int64_t T) {
      if (layer >= 1) os.observe(layer - 1, x, T);
    };
    rep.base_ppl = score(*base, w, observed, nullptr, &base_top).first.ppl();
    rep.outliers = os.report(rep.outlier_threshold);
  }
  for (const FakeQuantScheme& s : fake_quant_schemes()) {
    if (!only.empty() && std::find(only.begin(), only.end(), s.name) == only.end()) continue;
    auto model = load();
    QuantErrorRow row{s.name, s.description, s.bits_per_weight};
    double sum_sq = 0;
    int64_t n = 0;
    model->edit_layer_weights([&](const std::string&, float* wt, int64_t rows, int64_t cols) {
      ++row.matrices;
      if (cols % s.block != 0) return void(++row.skipped_matrices);
      const std::vector<float> orig(wt, wt + rows * cols);
      s.apply(wt, rows, cols);
      for (int64_t i = 0; i < rows * cols; ++i) sum_sq += static_cast<double>(wt[i] - orig[i]) * (wt[i] - orig[i]);
      n += rows * cols;
    });
    row.weight_rmse = n ? std::sqrt(sum_sq / n) : 0;
    const auto [nll, same] = score(*model, w, opt, &base_top, nullptr);
    row.ppl = nll.ppl();
    row.top1_agreement = nll.count ? static_cast<double>(same) / nll.count : 0;
    log_info("quant-error: {:<16} rmse {:.3e}  ppl {:.4f}  top-1 {:.2f}%", row.scheme, row.weight_rmse, row.ppl,
             100 * row.top1_agreement);
    rep.rows.push_back(std::move(row));
  }
  return rep;
}

}  // namespace kvik
