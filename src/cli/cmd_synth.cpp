// kvik synth: writes a random-weight Llama-family model of any shape, as a GGUF file or a Hugging Face directory
// (model/synth.h); tests and benchmarks use these instead of downloaded models.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "model/synth.h"
#include "tensor/dtype.h"

namespace kvik::cli {

Run add_synth(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  auto type = std::make_shared<std::string>("f32");
  auto* c =
      app.add_subcommand("synth", "Write a random-weight Llama GGUF model of any shape (loads in kvik and llama.cpp)");
  c->add_option("out", o->out_path, "Output .gguf path (with --hf: optional, the same weights as GGUF)");
  c->add_option("--hf", o->hf_dir, "Write a Hugging Face directory (config.json + model.safetensors) here");
  c->add_option("--arch", o->arch,
                "llama, mixtral (llama + experts), qwen3moe (q/k norm + experts), gemma2, gemma3 or phi3; with --hf "
                "also qwen2 (attention biases) or qwen3 (q/k norm)")
      ->capture_default_str();
  c->add_option("--experts", o->experts, "Experts per block E (mixtral, qwen3moe)");
  c->add_option("--experts-used", o->experts_used, "Experts the router picks per token k");
  c->add_option("--expert-ff", o->expert_ff, "qwen3moe: expert width d_ff_exp (0 = --ff)");
  c->add_option("--sliding-window", o->sliding_window,
                "Mistral-style sliding-window attention over the last W positions (0 = none)");
  c->add_flag("--tied", o->tied, "With --hf: tie_word_embeddings (no lm_head.weight)");
  c->add_flag("--rope-scaling-llama3", o->rope_scaling_llama3, "With --hf: Llama 3.1 rope_scaling");
  c->add_option("--tokenizer-dir", o->tokenizer_dir,
                "With --hf: copy tokenizer.json and tokenizer_config.json from this directory");
  c->add_option("--dim", o->dim, "Model width d")->capture_default_str();
  c->add_option("--layers", o->layers, "Blocks L")->capture_default_str();
  c->add_option("--heads", o->heads, "Query heads n_h")->capture_default_str();
  c->add_option("--kv-heads", o->kv_heads, "KV heads n_kv")->capture_default_str();
  c->add_option("--head-dim", o->head_dim, "Head dimension d_h (0 = dim / heads)")->capture_default_str();
  c->add_option("--ff", o->ff, "MLP width d_ff")->capture_default_str();
  c->add_option("--vocab", o->vocab, "Vocabulary size V")->capture_default_str();
  c->add_option("--context", o->context, "Context length")->capture_default_str();
  c->add_option("--type", *type, "Weight type: f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k, or q4_k_m (llama.cpp's mix)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k", "q4_k_m"}))
      ->capture_default_str();
  c->add_option("--tokenizer-from", o->tokenizer_from, "Copy the tokenizer of this GGUF (padded to --vocab)");
  c->add_option("--embed-from", o->embed_from,
                "A small llama GGUF whose function the model computes in this bigger shape (its weights placed, the "
                "rest zero): the big shape's cost with a real model's predictions");
  c->add_flag("--induction", o->induction,
              "A hand-built 2-layer model whose greedy output copies what followed its last two tokens earlier in "
              "the text (fixed shape; vocabulary up to 512): a model that copies its prompt");
  c->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  c->add_option("--output-scale", o->output_scale,
                "Multiply the std of output.weight (3/sqrt(dim)) by this; above 1: peakier next-token distributions")
      ->capture_default_str();
  return [o, type, c]() {
    if (o->induction)
      for (const char* flag : {"--dim", "--layers", "--heads", "--kv-heads", "--head-dim", "--ff", "--type", "--hf"})
        if (c->count(flag) > 0)
          fail(
              "synth: --induction writes a fixed shape (width 128, 2 layers, 2 heads of 64, f32): drop {}; place "
              "it in a bigger shape with a second synth --embed-from",
              flag);
    o->q4_k_m = *type == "q4_k_m";
    o->type = o->q4_k_m ? DType::Q4_K : *dtype_from_name(*type);
    if (!o->hf_dir.empty()) {
      synth_hf(*o);
      std::fprintf(stderr, "wrote %s%s%s\n", o->hf_dir.c_str(), o->out_path.empty() ? "" : " and ",
                   o->out_path.c_str());
      return 0;
    }
    if (o->out_path.empty()) fail("synth: give an output .gguf path, or --hf DIR");
    synth_llama_gguf(*o);
    std::fprintf(stderr, "wrote %s\n", o->out_path.c_str());
    return 0;
  };
}

}  // namespace kvik::cli
