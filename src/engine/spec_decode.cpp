#include "engine/spec_decode.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace kvik {

namespace {

constexpr int32_t kMaxSpeculativeTokens = 32;
constexpr int32_t kMaxLookup = 64;

int32_t int_key(const nlohmann::json& j, const char* key, int32_t lo, int32_t hi) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) fail("--speculative-config: \"{}\" must be an integer, got {}", key, v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) fail("--speculative-config: \"{}\" must be in {}..{}, got {}", key, lo, hi, x);
  return static_cast<int32_t>(x);
}

void check_keys(const nlohmann::json& j, const std::string& method, const std::vector<std::string>& known) {
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "method" && std::find(known.begin(), known.end(), it.key()) == known.end())
      fail("--speculative-config: unknown key \"{}\" for method \"{}\" (known: {})", it.key(), method,
           fmt::join(known, ", "));
  if (!j.contains("num_speculative_tokens"))
    fail("--speculative-config: \"num_speculative_tokens\" is required for method \"{}\"", method);
}

void parse_ngram(const nlohmann::json& j, SpeculativeConfig& c) {
  check_keys(j, "ngram",
             {"num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min", "disable_by_batch_size", "adaptive"});
  c.method = SpeculativeConfig::Method::kNgram;
  c.num_speculative_tokens = int_key(j, "num_speculative_tokens", 1, kMaxSpeculativeTokens);
  const bool has_max = j.contains("prompt_lookup_max"), has_min = j.contains("prompt_lookup_min");
  c.prompt_lookup_max = has_max ? int_key(j, "prompt_lookup_max", 1, kMaxLookup) : 0;
  c.prompt_lookup_min = has_min ? int_key(j, "prompt_lookup_min", 1, kMaxLookup) : 0;
  if (!has_max && !has_min) c.prompt_lookup_max = c.prompt_lookup_min = 5;  // vLLM's defaults
  if (!has_max) c.prompt_lookup_max = c.prompt_lookup_min;
  if (!has_min) c.prompt_lookup_min = c.prompt_lookup_max;
  if (c.prompt_lookup_min > c.prompt_lookup_max)
    fail("--speculative-config: \"prompt_lookup_min\" ({}) is larger than \"prompt_lookup_max\" ({})",
         c.prompt_lookup_min, c.prompt_lookup_max);
}

void parse_suffix(const nlohmann::json& j, SpeculativeConfig& c) {
  const std::vector<std::string> known = {
      "num_speculative_tokens",          "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
      "suffix_decoding_max_spec_factor", "disable_by_batch_size",          "adaptive"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "method" && std::find(known.begin(), known.end(), it.key()) == known.end())
      fail("--speculative-config: unknown key \"{}\" for method \"suffix\" (known: {})", it.key(),
           fmt::join(known, ", "));
  c.method = SpeculativeConfig::Method::kSuffix;
  if (j.contains("suffix_decoding_max_tree_depth"))
    c.suffix_max_tree_depth = int_key(j, "suffix_decoding_max_tree_depth", 2, 1024);
  if (j.contains("suffix_decoding_max_cached_requests"))
    c.suffix_max_cached_requests = int_key(j, "suffix_decoding_max_cached_requests", 0, 100000);
  if (j.contains("suffix_decoding_max_spec_factor")) {
    const nlohmann::json& v = j["suffix_decoding_max_spec_factor"];
    if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > 64)
      fail("--speculative-config: \"suffix_decoding_max_spec_factor\" must be a number in (0, 64], got {}", v.dump());
    c.suffix_max_spec_factor = v.get<double>();
  }
  // As vLLM: without num_speculative_tokens the tree depth bounds the drafts.
  c.num_speculative_tokens = j.contains("num_speculative_tokens")
                                 ? int_key(j, "num_speculative_tokens", 1, kMaxSpeculativeTokens)
                                 : std::min(c.suffix_max_tree_depth, kMaxSpeculativeTokens);
}

void parse_draft_model(const nlohmann::json& j, SpeculativeConfig& c) {
  check_keys(j, "draft_model", {"model", "num_speculative_tokens", "disable_by_batch_size", "adaptive"});
  c.method = SpeculativeConfig::Method::kDraftModel;
  c.num_speculative_tokens = int_key(j, "num_speculative_tokens", 1, kMaxSpeculativeTokens);
  if (!j.contains("model") || !j["model"].is_string() || j["model"].get<std::string>().empty())
    fail("--speculative-config: \"model\" (the draft model's path, a string) is required for method \"draft_model\"");
  c.model = j["model"].get<std::string>();
}

}  // namespace

SpeculativeConfig parse_speculative_config(const std::string& json) {
  SpeculativeConfig c;
  if (json.empty()) return c;
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded()) fail("--speculative-config: not valid JSON: {}", json);
  if (!j.is_object()) fail("--speculative-config: expected a JSON object, got {}", json);
  if (!j.contains("method") || !j["method"].is_string())
    fail("--speculative-config: \"method\" (a string: \"ngram\", \"draft_model\" or \"suffix\") is required");
  const std::string method = j["method"].get<std::string>();
  if (method == "ngram" || method == "[ngram]")
    parse_ngram(j, c);
  else if (method == "draft_model")
    parse_draft_model(j, c);
  else if (method == "suffix")
    parse_suffix(j, c);
  else
    fail("--speculative-config: unknown method \"{}\" (supported: \"ngram\", \"draft_model\", \"suffix\")", method);
  if (j.contains("disable_by_batch_size"))
    c.disable_by_batch_size = int_key(j, "disable_by_batch_size", 1, std::numeric_limits<int32_t>::max());
  if (j.contains("adaptive")) {
    if (!j["adaptive"].is_boolean())
      fail("--speculative-config: \"adaptive\" must be true or false, got {}", j["adaptive"].dump());
    c.adaptive = j["adaptive"].get<bool>();
  }
  return c;
}

std::string describe(const SpeculativeConfig& c) {
  switch (c.method) {
    case SpeculativeConfig::Method::kNone: return "off";
    case SpeculativeConfig::Method::kNgram:
      return fmt::format("ngram, {} {} speculative tokens, prompt lookup n = {}..{}", c.adaptive ? "up to" : "always",
                         c.num_speculative_tokens, c.prompt_lookup_min, c.prompt_lookup_max);
    case SpeculativeConfig::Method::kSuffix:
      return fmt::format("suffix, {} {} speculative tokens, match depth {}, {} cached requests, spec factor {}",
                         c.adaptive ? "up to" : "always", c.num_speculative_tokens, c.suffix_max_tree_depth,
                         c.suffix_max_cached_requests, c.suffix_max_spec_factor);
    case SpeculativeConfig::Method::kDraftModel:
      return fmt::format("draft model {}, {} {} speculative tokens (greedy drafts)", c.model,
                         c.adaptive ? "up to" : "always", c.num_speculative_tokens);
  }
  return "";
}

int32_t ngram_propose(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n, int32_t k,
                      std::vector<int32_t>& out) {
  out.clear();
  const auto L = static_cast<int64_t>(tokens.size());
  if (k <= 0) return 0;
  for (int64_t n = std::min<int64_t>(max_n, L - 1); n >= min_n; --n) {
    const int32_t* suffix = tokens.data() + (L - n);
    for (int64_t i = L - n - 1; i >= 0; --i) {  // most recent earlier occurrence first
      if (!std::equal(suffix, suffix + n, tokens.data() + i)) continue;
      const int64_t end = i + n;  // < L: at least one known token follows the match
      for (int64_t j = 0; j < k; ++j) {
        const int64_t idx = end + j;
        out.push_back(idx < L ? tokens[static_cast<size_t>(idx)] : out[static_cast<size_t>(idx - L)]);
      }
      return static_cast<int32_t>(out.size());
    }
  }
  return 0;
}

void SpecDecodeGate::record(int32_t num_drafted, int32_t num_accepted, int64_t num_output_tokens) {
  drafted_ += num_drafted;
  accepted_ += num_accepted;
  if (drafted_ < kWindow) return;
  if (static_cast<double>(accepted_) < kMinAcceptance * static_cast<double>(drafted_))
    pause(num_output_tokens);  // also starts the next window
  else
    failures_ = 0, drafted_ = accepted_ = 0;
}

void SpecDecodeGate::pause(int64_t num_output_tokens) {
  paused_until_ = num_output_tokens + (kPauseTokens << std::min(failures_, kMaxBackoff));
  ++failures_;
  drafted_ = accepted_ = 0;
  successes_ = kPriorSuccesses;
  trials_ = kPriorTrials;
}

void SpecDecodeGate::observe_verification(int32_t num_drafted, int32_t num_accepted) {
  successes_ = kDecay * successes_ + num_accepted;
  trials_ = kDecay * trials_ + num_accepted + (num_accepted < num_drafted ? 1 : 0);
}

void StepCostModel::observe(int64_t num_tokens, double seconds) {
  if (num_tokens <= 0 || num_tokens > kMaxTracked || !(seconds > 0)) return;
  double& m = mean_[static_cast<size_t>(num_tokens)];
  if (m == 0) {
    m = seconds;
    ++num_sizes_;
  } else {
    m += kWeight * (seconds - m);
  }
}

double StepCostModel::predict(int64_t n) const {
  if (!calibrated() || n <= 0) return 0;
  const int64_t top = std::min(n, kMaxTracked);
  if (mean_[static_cast<size_t>(top)] > 0 && top == n) return mean_[static_cast<size_t>(n)];
  int64_t lo = 0, hi = 0;  // nearest sizes seen below and above n
  for (int64_t i = top; i >= 1; --i)
    if (mean_[static_cast<size_t>(i)] > 0) {
      lo = i;
      break;
    }
  for (int64_t i = top + 1; i <= kMaxTracked && n <= kMaxTracked; ++i)
    if (mean_[static_cast<size_t>(i)] > 0) {
      hi = i;
      break;
    }
  auto at = [&](int64_t i) { return mean_[static_cast<size_t>(i)]; };
  if (lo > 0 && hi > 0) return at(lo) + (at(hi) - at(lo)) * static_cast<double>(n - lo) / static_cast<double>(hi - lo);
  if (lo == 0) return at(hi);  // below every size seen: no more than the smallest
  int64_t lo2 = 0;             // above every size seen: the slope of the two largest
  for (int64_t i = lo - 1; i >= 1; --i)
    if (at(i) > 0) {
      lo2 = i;
      break;
    }
  const double slope = std::max(0.0, (at(lo) - at(lo2)) / static_cast<double>(lo - lo2));
  return at(lo) + slope * static_cast<double>(n - lo);
}

double expected_tokens_per_step(double alpha, int32_t k) {
  double e = 0, p = 1;
  for (int32_t i = 0; i <= k; ++i, p *= alpha) e += p;  // Σ α^i, i = 0..k: exact also at α = 1
  return e;
}

int32_t choose_num_drafts(const StepCostModel& cost, int64_t step_tokens, double step_yield, double alpha,
                          int32_t k_max, double draft_token_seconds) {
  if (k_max <= 0) return 0;
  if (!cost.calibrated()) return k_max;
  const double base = step_yield / cost.predict(step_tokens);
  int32_t best = 0;
  double best_rate = base * kMinGain;
  for (int32_t k = 1; k <= k_max; ++k) {
    const double seconds = cost.predict(step_tokens + k) + draft_token_seconds * k;
    const double rate = (step_yield - 1 + expected_tokens_per_step(alpha, k)) / seconds;
    if (rate > best_rate) best = k, best_rate = rate;
  }
  return best;
}

}  // namespace kvik
