// kvik merge-lora BASE ADAPTER OUT.gguf (model/lora_merge.h) and kvik synth-lora BASE OUT (model/synth_lora.h).
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "model/llama.h"
#include "model/lora_merge.h"
#include "model/synth_lora.h"

namespace kvik::cli {

Run add_merge_lora(CLI::App& app) {
  struct Opts {
    std::string base, adapter, out, type;
    float scale = 1.0f;
  };
  auto o = std::make_shared<Opts>();
  auto* c = app.add_subcommand("merge-lora", "Bake a LoRA adapter into a new GGUF base model (W' = W + s·BA)");
  c->add_option("base", o->base, "GGUF base model")->required();
  c->add_option("adapter", o->adapter, "PEFT adapter directory or GGUF LoRA file")->required();
  c->add_option("out", o->out, "GGUF file to write")->required();
  c->add_option("--scale", o->scale, "Multiplier on the adapter's alpha / r (default 1)");
  c->add_option("--type", o->type, "Type of the rewritten matrices (default: each one's own type)");
  return [o]() {
    MergeLoraOptions opt;
    opt.base_path = o->base;
    opt.adapter_path = o->adapter;
    opt.out_path = o->out;
    opt.scale = o->scale;
    if (!o->type.empty()) {
      opt.type = dtype_from_name(o->type);
      if (!opt.type) fail("--type '{}' is not a GGUF type name (f32, f16, q8_0, ...)", o->type);
    }
    const int64_t n = merge_lora(opt);
    std::printf("wrote %s: %lld matrices merged with %s\n", o->out.c_str(), static_cast<long long>(n),
                o->adapter.c_str());
    return 0;
  };
}

Run add_synth_lora(CLI::App& app) {
  struct Opts {
    std::string base, out, type = "f32", targets;
    SynthLoraOptions s;
  };
  auto o = std::make_shared<Opts>();
  auto* c =
      app.add_subcommand("synth-lora", "Write a random-weight LoRA adapter (GGUF, or PEFT with --peft) for a base");
  c->add_option("base", o->base, "Base model (GGUF or Hugging Face directory) the adapter fits")->required();
  c->add_option("out", o->out, "GGUF file (or PEFT directory with --peft) to write")->required();
  c->add_flag("--peft", o->s.peft, "Write a PEFT directory (adapter_config.json + adapter_model.safetensors)");
  c->add_option("--rank,-r", o->s.rank, "LoRA rank r (default 8)");
  c->add_option("--alpha", o->s.alpha, "lora_alpha (default 16)");
  c->add_flag("--rslora", o->s.rslora, "use_rslora: scale alpha / sqrt(r)");
  c->add_option("--type", o->type, "f32, f16 or bf16 (default f32)");
  c->add_option("--seed", o->s.seed, "Random seed (default 1)");
  c->add_option("--b-std", o->s.b_std, "Std of lora_B's entries (default 0.05)");
  c->add_option("--targets", o->targets, "Comma-separated subset of q,k,v,o,gate,up,down (default all)");
  return [o]() {
    SynthLoraOptions s = o->s;
    s.out = o->out;
    const auto t = dtype_from_name(o->type);
    if (!t) fail("--type '{}' is not a type name (f32, f16, bf16)", o->type);
    s.type = *t;
    if (!o->targets.empty()) s.targets = parse_lora_targets(o->targets);
    const auto base = LlamaModel::load(o->base, LoadOptions{false});
    synth_lora(s, base->config());
    std::printf("wrote %s: rank %lld LoRA for %s\n", s.out.c_str(), static_cast<long long>(s.rank), o->base.c_str());
    return 0;
  };
}

}  // namespace kvik::cli
