#include "model/quantize_input.h"

#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>
#include "core/error.h"

#include "formats/gguf.h"
#include "formats/json_file.h"
#include "formats/safetensors.h"
#include "model/hf_layout.h"
#include "model/model_config.h"
#include "tokenizer/bpe_tokenizer.h"

namespace kvik {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

class GgufInput final : public QuantizeInput {
 public:
  explicit GgufInput(const std::string& path) : g_(GgufFile::open(path)) {
    path_ = path;
    model_.arch = g_->require_string("general.architecture");
    const std::string a = model_.arch + ".";
    model_.n_layers = g_->get_int(a + "block_count").value_or(0);
    model_.n_heads = g_->get_int(a + "attention.head_count").value_or(0);
    model_.n_kv_heads = g_->get_int(a + "attention.head_count_kv").value_or(model_.n_heads);
    for (const auto& t : g_->tensors())
      tensors_.push_back({t.name, t.dtype, t.shape, t.dtype, t.data, t.nbytes, 0, g_->mapping()});
  }

  // The input's metadata as llama-quantize copies it: every key in order except the split keys and the two the
  // quantizer writes last.
  void write_metadata(GgufWriter& w) const override {
    for (const auto& [key, value] : g_->metadata()) {
      if (key == "general.quantization_version" || key == "general.file_type" || key == "split.no" ||
          key == "split.count" || key == "split.tensors.count")
        continue;
      w.set_raw(key, value.raw);
    }
    if (g_->alignment() != 32) w.set_alignment(g_->alignment());
  }

 private:
  std::unique_ptr<GgufFile> g_;
};

// tokenizer.json as tokenizer.ggml.*: byte-level BPE only (what BpeTokenizer::write_gguf_metadata writes).
std::unique_ptr<BpeTokenizer> gguf_tokenizer(const std::string& dir, int64_t vocab_size) {
  std::unique_ptr<Tokenizer> tok = load_tokenizer(dir);
  auto* bpe = dynamic_cast<BpeTokenizer*>(tok.get());
  const std::string file = (std::filesystem::path(dir) / "tokenizer.json").string();
  if (!bpe || !bpe->byte_level())
    fail(
        "{}: a SentencePiece-style tokenizer (Metaspace pre-tokenizer, <0xNN> byte fallback, as Llama 2 and "
        "Mistral 7B ship it); kvik quantize writes only byte-level BPE tokenizers (Llama 3, Qwen2, Qwen3) into "
        "tokenizer.ggml.* (llama.cpp's converter builds this kind from tokenizer.model, which kvik does not read)",
        file);
  if (bpe->gguf_pre_name().empty())
    fail(
        "{}: byte-level BPE with pre-tokenizer '{}', which has no tokenizer.ggml.pre name kvik knows (llama-bpe, "
        "qwen2, gpt2)",
        file, bpe->pre_tokenizer().name());
  if (bpe->vocab_size() > vocab_size)
    fail("{}: {} tokens, more than config.json's vocab_size {} (the embedding needs a row per token)", file,
         bpe->vocab_size(), vocab_size);
  tok.release();
  return std::unique_ptr<BpeTokenizer>(bpe);
}

class HfInput final : public QuantizeInput {
 public:
  explicit HfInput(const std::string& dir) : config_(config_from_hf(dir)), st_(SafetensorsModel::open_dir(dir)) {
    path_ = dir;
    if (config_.is_gemma())
      fail(
          "{}: kvik quantize does not read Gemma Hugging Face directories (convert with llama.cpp's "
          "convert_hf_to_gguf.py first, or quantize the GGUF)",
          dir);
    if (config_.is_moe())
      fail(
          "{}: kvik quantize does not read mixture-of-experts Hugging Face directories (convert with llama.cpp's "
          "convert_hf_to_gguf.py first)",
          dir);
    model_ = {config_.arch, config_.n_layers, config_.n_heads, config_.n_kv_heads};
    if (config_.tied_embeddings && st_->find("lm_head.weight"))
      config_.tied_embeddings = false;  // the converter keeps it
    tokenizer_ = gguf_tokenizer(dir, config_.vocab_size);
    add_tensors();
  }

  void write_metadata(GgufWriter& w) const override {
    w.set_string("general.architecture", config_.arch);
    w.set_string("general.type", "model");
    const std::string base = std::filesystem::path(path_).lexically_normal().filename().string();
    w.set_string("general.name", !config_.name.empty() ? config_.name : base.empty() ? "model" : base);
    write_arch_metadata(config_, w);
    tokenizer_->write_gguf_metadata(w, config_.vocab_size);
    // Special ids tokenizer_config.json leaves unset come from config.json, as the converter's SpecialVocab takes
    // them (Qwen: bos_token null, config.json bos_token_id 151643).
    const nlohmann::json cfg = read_json_file(std::filesystem::path(path_) / "config.json");
    for (const auto& [key, id] : {std::pair{"bos", tokenizer_->bos_id()}, std::pair{"eos", tokenizer_->eos_id()}}) {
      const std::string field = std::string(key) + "_token_id";
      if (id < 0 && cfg.contains(field) && cfg[field].is_number_integer() && cfg[field].get<int64_t>() >= 0 &&
          cfg[field].get<int64_t>() < config_.vocab_size)
        w.set_u32("tokenizer.ggml." + field, cfg[field].get<uint32_t>());
    }
  }

 private:
  void add_tensors();

  ModelConfig config_;
  std::unique_ptr<SafetensorsModel> st_;
  std::unique_ptr<BpeTokenizer> tokenizer_;
};

void HfInput::add_tensors() {
  std::set<std::string> known;
  // The converter's extra tensors come first (config_ keeps the values for as long as this input lives).
  for_each_rope_factor_tensor(config_, [&](const std::string& name, const std::vector<float>& f) {
    tensors_.push_back({name,
                        DType::F32,
                        {static_cast<int64_t>(f.size())},
                        DType::F32,
                        reinterpret_cast<const uint8_t*>(f.data()),
                        f.size() * sizeof(float),
                        0,
                        nullptr});
  });
  for (const HfTensorLayout& t : hf_tensor_layout(config_)) {
    known.insert(t.hf_name);
    const SafetensorsTensor* s = st_->find(t.hf_name);
    if (!s)
      fail("{}: tensor '{}' (GGUF {}) is missing from the safetensors files (config.json describes a {} of {} layers)",
           path_, t.hf_name, t.gguf_name, config_.arch, config_.n_layers);
    if (s->shape != t.shape)
      fail("{}: tensor '{}' has shape {}, config.json implies {}", s->file, t.hf_name, shape_str(s->shape),
           shape_str(t.shape));
    const bool vec = t.shape.size() == 1;
    // convert_hf_to_gguf.py writes vectors and norms as F32, everything else in the stored type.
    const DType dtype = vec || t.gguf_name.ends_with("_norm.weight") ? DType::F32 : s->dtype;
    std::vector<int64_t> shape = vec ? t.shape : std::vector<int64_t>{t.shape[1], t.shape[0]};
    tensors_.push_back(
        {t.gguf_name, dtype, std::move(shape), s->dtype, s->data, s->nbytes, t.permute ? config_.head_dim : 0, s->map});
  }
  for (const SafetensorsTensor* s : st_->all())
    if (!known.count(s->name) && !hf_tensor_dropped(s->name))
      fail("{}: tensor '{}' is not part of a {} checkpoint as kvik reads it (no GGUF name for it)", s->file, s->name,
           config_.arch);
}

}  // namespace

std::unique_ptr<QuantizeInput> QuantizeInput::open(const std::string& path) {
  if (std::filesystem::is_directory(path)) return std::make_unique<HfInput>(path);
  return std::make_unique<GgufInput>(path);
}

}  // namespace kvik
