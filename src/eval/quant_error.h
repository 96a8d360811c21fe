// The quantization-error table on the user's model: each scheme fake-quantizes every linear weight of the
// layers (quantize, dequantize back to f32, in memory), and the table shows the weight RMSE, the perplexity
// and the top-1 agreement with the unquantized model; plus the outlier report (residual-stream dimensions whose
// |activation| exceeds 6× the layer's RMS).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "eval/perplexity.h"

namespace kvik {

struct FakeQuantScheme {
  std::string name;  // "int4 group-128", "q4_K"
  std::string description;
  double bits_per_weight;  // for a row of 4096 (scales included, 16-bit scales)
  int64_t block = 1;       // the row length must be a multiple of this, or the matrix stays unquantized
  // Quantizes and dequantizes rows × cols weights (row-major) in place.
  std::function<void(float* w, int64_t rows, int64_t cols)> apply;
};

// The schemes (absmax int8 per tensor and per row, int4 per tensor, per row and in groups of 128, NF4
// in groups of 64 with QLoRA's codebook) and the GGUF types kvik can quantize, through tensor/'s quantizers.
std::vector<FakeQuantScheme> fake_quant_schemes();

// The QLoRA NF4 codebook (normal-float quantiles, −1 … 1, 0 exactly representable).
extern const float kNf4Codebook[16];

struct QuantErrorRow {
  std::string scheme, description;
  double bits_per_weight = 0;
  double weight_rmse = 0;        // over every fake-quantized weight
  int64_t matrices = 0;          // linear weights of the layers
  int64_t skipped_matrices = 0;  // rows not a multiple of the scheme's block: left unquantized
  double ppl = 0, top1_agreement = 0;
};

struct LayerOutliers {
  int64_t layer = 0;
  double rms = 0;                                // of the residual stream after the block, over the text
  std::vector<std::pair<int64_t, double>> dims;  // (dimension, max |x| / rms) above the threshold, largest first
};

struct QuantErrorReport {
  double base_ppl = 0;
  std::vector<QuantErrorRow> rows;
  std::vector<LayerOutliers> outliers;
  double outlier_threshold = 6.0;
};

// `load` gives a fresh copy of the model (one per scheme; each scheme edits its copy's weights). `only`: scheme
// names to run (empty: all).
QuantErrorReport quant_error(const std::function<std::unique_ptr<LlamaModel>()>& load, const PerplexityWindows& w,
                             const PerplexityOptions& opt, const std::vector<std::string>& only = {});

}  // namespace kvik
