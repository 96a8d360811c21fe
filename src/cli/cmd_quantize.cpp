// kvik quantize IN OUT TYPE: llama-quantize's mixes, written by kvik (model/quantize_model.h).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/quantize_model.h"

namespace kvik::cli {
namespace {

struct QuantizeFlags {
  std::string input, output, type, output_tensor_type, token_embedding_type;
  int threads = 0;
  bool leave_output_tensor = false, quiet = false;
};

DType tensor_type_flag(const std::string& flag, const std::string& name) {
  const auto t = dtype_from_name(name);
  if (!t) fail("{} {}: not a tensor type (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q4_k q5_k q6_k)", flag, name);
  return *t;
}

}  // namespace

Run add_quantize(CLI::App& app) {
  auto f = std::make_shared<QuantizeFlags>();
  auto* c = app.add_subcommand(
      "quantize",
      "Quantize a GGUF model (F32/F16/BF16) or a Hugging Face directory as llama-quantize does, byte for byte");
  c->add_option(
       "input", f->input,
       "Input .gguf (F32, F16 or BF16 weights) or Hugging Face directory (config.json, safetensors, tokenizer.json)")
      ->required();
  c->add_option("output", f->output, "Output .gguf")->required();
  c->add_option("type", f->type, "Mix: " + quant_mix_names())->required();
  c->add_option("--threads", f->threads, "Quantization threads (0 = all cores)")->capture_default_str();
  c->add_flag("--leave-output-tensor", f->leave_output_tensor, "Keep output.weight in its input type");
  c->add_option("--output-tensor-type", f->output_tensor_type, "Type of output.weight (and of tied token embeddings)");
  c->add_option("--token-embedding-type", f->token_embedding_type, "Type of token_embd.weight");
  c->add_flag("--quiet", f->quiet, "No progress lines on stderr");
  return [f]() {
    QuantizeOptions o;
    o.input = f->input, o.output = f->output;
    const auto mix = quant_mix(f->type);
    if (!mix) fail("quantize: unknown type '{}' (one of: {})", f->type, quant_mix_names());
    o.mix = *mix;
    o.recipe.leave_output_tensor = f->leave_output_tensor;
    if (!f->output_tensor_type.empty())
      o.recipe.output_tensor_type = tensor_type_flag("--output-tensor-type", f->output_tensor_type);
    if (!f->token_embedding_type.empty())
      o.recipe.token_embedding_type = tensor_type_flag("--token-embedding-type", f->token_embedding_type);
    o.progress = !f->quiet;
    if (f->threads < 0) fail("--threads must be 0 (all cores) or more");
    if (f->threads > 0) ThreadPool::global().set_num_threads(f->threads);
    quantize_model(o);
    return 0;
  };
}

}  // namespace kvik::cli
