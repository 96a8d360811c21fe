#include "cli/engine_flags.h"

#include "core/error.h"

namespace kvik::cli {

DType parse_kv_dtype(const std::string& name) {
  if (name == "auto" || name == "f16") return DType::F16;
  if (name == "f32") return DType::F32;
  if (name == "q8_0") return DType::Q8_0;
  if (name == "fp8" || name == "fp8_e4m3") return DType::F8_E4M3;
  fail("unknown --kv-cache-dtype '{}' (auto, f16, f32, q8_0, fp8)", name);
}

void add_engine_flags(CLI::App* c, EngineFlags& f) {
  EngineConfig& e = f.config;
  c->add_option("--max-model-len", e.max_model_len, "Max context per sequence (default: the model's)");
  c->add_option("--max-num-seqs", e.max_num_seqs, "Max requests in one step (the decode batch size)")
      ->capture_default_str();
  c->add_option("--max-num-batched-tokens", e.max_num_batched_tokens, "Token budget per step (chunked prefill)")
      ->capture_default_str();
  c->add_option("--block-size", e.block_size, "Tokens per KV block")->capture_default_str();
  c->add_option("--kv-cache-memory", e.kv_cache_memory_gib,
                "KV cache size in GiB (default: from --memory-utilization)");
  c->add_option("--memory-utilization", e.memory_utilization,
                "Fraction of RAM for weights + KV cache when --kv-cache-memory is not given")
      ->capture_default_str();
  c->add_option("--kv-cache-dtype", f.kv_cache_dtype,
                "KV cache element type: auto (= f16), f16, f32, q8_0 (8-bit blocks of 32), fp8 (e4m3, scale 1)")
      ->check(CLI::IsMember({"auto", "f16", "f32", "q8_0", "fp8", "fp8_e4m3"}))
      ->capture_default_str();
  c->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", e.enable_prefix_caching,
              "Reuse the KV blocks of shared prompt prefixes (default on)");
  c->add_option("--long-prefill-token-threshold", e.long_prefill_token_threshold,
                "Longest prompt chunk per step (0 = the token budget)");
  c->add_option("--threads,-t", e.num_threads, "Compute threads (default: all cores)");
  c->add_flag("--repack,!--no-repack", e.repack_weights,
              "Repack F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL/Q4_K/Q5_K/Q6_K weights at load for the row-parallel "
              "AVX2 / AVX-512 / AMX kernels (default on)");
  c->add_option("--tensor-parallel-size", e.parallel.tensor_parallel_size,
                "Split every layer's heads and MLP over this many ranks (under mpirun; see docs/parallelism.md)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_option("--pipeline-parallel-size", e.parallel.pipeline_parallel_size,
                "Split the layers into this many stages, one per group of ranks (under mpirun)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c->add_flag("--enable-expert-parallel", e.parallel.enable_expert_parallel,
              "Mixture-of-experts models: place whole experts on the --tensor-parallel-size ranks (E/T each) instead "
              "of slicing every expert");
  c->add_option("--speculative-config", f.speculative_config,
                "Speculative decoding as JSON, e.g. {\"method\": \"ngram\", \"num_speculative_tokens\": 4, "
                "\"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2} (default: off)");
}

EngineConfig EngineFlags::resolve() const {
  EngineConfig c = config;
  c.kv_cache_dtype = parse_kv_dtype(kv_cache_dtype);
  c.speculative = parse_speculative_config(speculative_config);
  return c;
}

}  // namespace kvik::cli
