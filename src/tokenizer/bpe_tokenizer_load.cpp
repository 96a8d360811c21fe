// Building a BpeTokenizer from tokenizer.json (+ tokenizer_config.json) or from GGUF metadata.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "tokenizer/bpe_tokenizer.h"

namespace kvik {

namespace {

using json = nlohmann::json;

constexpr int64_t kMaxVocab = 1 << 24;  // ids above this are rejected before allocating by id

const json& member(const json& j, const char* key, const std::string& source, const char* where) {
  if (!j.is_object() || !j.contains(key)) fail("{}: {} has no \"{}\"", source, where, key);
  return j.at(key);
}

// tokenizer_config.json token fields are a string, an AddedToken object {"content": ...}, or null.
std::string config_token(const json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return {};
  const json& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return {};
}

void parse_normalizer(const json& n, std::vector<NormalizerStep>& steps, const std::string& source) {
  if (n.is_null()) return;
  const std::string type = member(n, "type", source, "normalizer").get<std::string>();
  if (type == "Sequence") {
    for (const json& s : member(n, "normalizers", source, "normalizer Sequence")) parse_normalizer(s, steps, source);
  } else if (type == "NFC") {
    steps.push_back({NormalizerStep::Kind::kNfc, {}, {}});
  } else if (type == "Prepend") {
    steps.push_back({NormalizerStep::Kind::kPrepend, member(n, "prepend", source, "Prepend").get<std::string>(), {}});
  } else if (type == "Replace") {
    const json& pattern = member(n, "pattern", source, "Replace normalizer");
    if (!pattern.contains("String"))
      fail("{}: Replace normalizer with a regex pattern is not supported (only {{\"String\": ...}})", source);
    steps.push_back({NormalizerStep::Kind::kReplace, pattern.at("String").get<std::string>(),
                     member(n, "content", source, "Replace normalizer").get<std::string>()});
  } else if (type == "Lowercase") {
    steps.push_back({NormalizerStep::Kind::kLowercase, {}, {}});
  } else {
    fail("{}: normalizer type '{}' is not supported (kvik knows Sequence, NFC, Prepend, Replace, Lowercase)", source,
         type);
  }
}

MetaspacePreTokenizer::Prepend metaspace_prepend(const json& m) {
  if (m.contains("prepend_scheme") && m.at("prepend_scheme").is_string()) {
    const std::string s = m.at("prepend_scheme").get<std::string>();
    if (s == "first") return MetaspacePreTokenizer::Prepend::kFirst;
    if (s == "never") return MetaspacePreTokenizer::Prepend::kNever;
    return MetaspacePreTokenizer::Prepend::kAlways;
  }
  if (m.contains("add_prefix_space") && m.at("add_prefix_space").is_boolean() && !m.at("add_prefix_space").get<bool>())
    return MetaspacePreTokenizer::Prepend::kNever;
  return MetaspacePreTokenizer::Prepend::kAlways;
}

// HF pre_tokenizer -> one PreTokenizer. Supported shapes: ByteLevel(use_regex) ; Split(Regex) + ByteLevel
// (no regex) in a Sequence ; Metaspace ; null.
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& p, bool& byte_level, const std::string& source) {
  if (p.is_null()) return std::make_unique<WholeTextPreTokenizer>();
  const std::string type = member(p, "type", source, "pre_tokenizer").get<std::string>();
  if (type == "ByteLevel") {
    byte_level = true;
    if (p.value("add_prefix_space", false))
      fail("{}: ByteLevel pre-tokenizer with add_prefix_space is not supported", source);
    if (p.value("use_regex", true)) return std::make_unique<Gpt2PreTokenizer>();
    return std::make_unique<WholeTextPreTokenizer>();
  }
  if (type == "Metaspace") {
    byte_level = false;
    return std::make_unique<MetaspacePreTokenizer>(p.value("replacement", std::string("\xE2\x96\x81")),
                                                   metaspace_prepend(p), p.value("split", true));
  }
  if (type == "Split") {
    const json& pattern = member(p, "pattern", source, "Split pre-tokenizer");
    if (!pattern.contains("Regex")) fail("{}: Split pre-tokenizer with a String pattern is not supported", source);
    if (p.value("behavior", std::string("Isolated")) != "Isolated" || p.value("invert", false))
      fail("{}: Split pre-tokenizer: only behavior Isolated without invert is supported", source);
    return make_regex_pre_tokenizer(pattern.at("Regex").get<std::string>());
  }
  if (type == "Sequence") {
    std::unique_ptr<PreTokenizer> split;
    for (const json& s : member(p, "pretokenizers", source, "pre_tokenizer Sequence")) {
      const std::string t = member(s, "type", source, "pre_tokenizer").get<std::string>();
      if (t == "ByteLevel" && s.value("use_regex", true) == false && !s.value("add_prefix_space", false)) {
        byte_level = true;
        continue;
      }
      if (split) fail("{}: pre_tokenizer Sequence with more than one splitting step is not supported", source);
      split = parse_pre_tokenizer(s, byte_level, source);
    }
    if (!split) split = std::make_unique<WholeTextPreTokenizer>();
    return split;
  }
  fail("{}: pre_tokenizer type '{}' is not supported", source, type);
}

// Whether the post-processor puts `bos` in front of a single sequence (HF TemplateProcessing).
bool post_processor_adds(const json& post, const std::string& bos) {
  if (post.is_object() && post.value("type", std::string()) == "Sequence" && post.contains("processors")) {
    for (const json& p : post.at("processors"))
      if (post_processor_adds(p, bos)) return true;
    return false;
  }
  if (!post.is_object() || post.value("type", std::string()) != "TemplateProcessing" || bos.empty()) return false;
  const json& single = post.value("single", json::array());
  return !single.empty() && single[0].contains("SpecialToken") && single[0]["SpecialToken"].value("id", "") == bos;
}

// model.vocab plus added_tokens: every token's text and type; holes become unused placeholders.
void read_vocab(const json& tj, const json& vocab_json, BpeSpec& spec) {
  const std::string& source = spec.source;
  int64_t n = 0;
  const auto check_id = [&](int64_t id, const std::string& text) {
    if (id < 0 || id >= kMaxVocab) fail("{}: token '{}' has id {} (allowed 0..{})", source, text, id, kMaxVocab - 1);
    n = std::max(n, id + 1);
  };
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    if (!it.value().is_number_integer()) fail("{}: model.vocab['{}'] is not an integer id", source, it.key());
    check_id(it.value().get<int64_t>(), it.key());
  }
  const json added = tj.value("added_tokens", json::array());
  for (const json& a : added) {
    AddedToken t;
    t.id = member(a, "id", source, "added token").get<int32_t>();
    t.content = member(a, "content", source, "added token").get<std::string>();
    t.special = a.value("special", false);
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    check_id(t.id, t.content);
    spec.added_tokens.push_back(std::move(t));
  }
  if (n == 0) fail("{}: the vocabulary is empty", source);

  Vocab& v = spec.vocab;
  v.tokens.assign(n, {});
  v.scores.assign(n, 0.0f);
  v.types.assign(n, TokenType::kUnused);
  v.token_to_id.reserve(n);
  for (auto it = vocab_json.begin(); it != vocab_json.end(); ++it) {
    const auto id = it.value().get<int32_t>();
    v.tokens[id] = it.key();
    v.types[id] = TokenType::kNormal;
  }
  for (const AddedToken& t : spec.added_tokens) {
    v.tokens[t.id] = t.content;
    v.types[t.id] = t.special ? TokenType::kControl : TokenType::kUserDefined;
  }
  for (int64_t id = 0; id < n; ++id) {
    if (v.types[id] == TokenType::kUnused) v.tokens[id] = "[UNUSED_" + std::to_string(id) + "]";
    v.token_to_id[v.tokens[id]] = static_cast<int32_t>(id);
  }
}

// byte_fallback, fuse_unk, ignore_merges, the unknown token and the merges.
void read_model_options(const json& model, BpeSpec& spec) {
  const std::string& source = spec.source;
  Vocab& v = spec.vocab;
  const auto n = static_cast<int64_t>(v.tokens.size());
  spec.byte_fallback = model.value("byte_fallback", false);
  spec.fuse_unk = model.value("fuse_unk", false);
  spec.ignore_merges = model.value("ignore_merges", false);
  if (spec.byte_fallback)
    for (int64_t id = 0; id < n; ++id) {
      const std::string& t = v.tokens[id];
      if (t.size() == 6 && t.starts_with("<0x") && t.ends_with(">") && v.types[id] == TokenType::kNormal)
        v.types[id] = TokenType::kByte;
    }
  if (model.contains("unk_token") && model.at("unk_token").is_string()) {
    v.unk_id = v.find(model.at("unk_token").get<std::string>());
    if (v.unk_id >= 0) v.types[v.unk_id] = TokenType::kUnknown;
  }

  for (const json& m : member(model, "merges", source, "model")) {
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) fail("{}: merge '{}' is not two tokens separated by a space", source, s);
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("{}: a merge is neither \"a b\" nor [\"a\", \"b\"]: {}", source, m.dump());
    }
  }
}

// Normalizer, pre-tokenizer and decoder.
void read_pipeline(const json& tj, BpeSpec& spec) {
  const std::string& source = spec.source;
  parse_normalizer(tj.value("normalizer", json()), spec.normalizer, source);
  bool byte_level = false;
  spec.pre_tokenizer = parse_pre_tokenizer(tj.value("pre_tokenizer", json()), byte_level, source);
  const json decoder = tj.value("decoder", json());
  const std::string decoder_json = decoder.dump();
  if (!byte_level && decoder.is_object() && decoder.value("type", "") == "ByteLevel") byte_level = true;
  spec.byte_level = byte_level;
  if (!byte_level) {
    // SentencePiece-style: the decoder turns "▁" into spaces and drops the space the encoder prepended.
    const bool strip = decoder_json.find("\"Strip\"") != std::string::npos ||
                       (decoder.is_object() && decoder.value("type", "") == "Metaspace" &&
                        metaspace_prepend(decoder) != MetaspacePreTokenizer::Prepend::kNever);
    spec.strip_leading_space = strip;
  }
}

// Special ids and flags: tokenizer_config.json first, then the post-processor; the chat template.
void read_specials(const json& tj, const json& config, BpeSpec& spec) {
  const std::string& source = spec.source;
  Vocab& v = spec.vocab;
  const std::string bos = config_token(config, "bos_token"), eos = config_token(config, "eos_token");
  const std::string pad = config_token(config, "pad_token"), unk = config_token(config, "unk_token");
  const auto id_of = [&](const std::string& text, const char* key) -> int32_t {
    if (text.empty()) return -1;
    const int32_t id = v.find(text);
    if (id < 0) fail("{}: tokenizer_config.json {} '{}' is not in the vocabulary", source, key, text);
    return id;
  };
  v.bos_id = id_of(bos, "bos_token");
  v.eos_id = id_of(eos, "eos_token");
  v.pad_id = id_of(pad, "pad_token");
  if (!unk.empty()) v.unk_id = id_of(unk, "unk_token");
  if (v.eos_id >= 0) v.eog_ids.push_back(v.eos_id);
  for (const char* extra : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>"}) {
    const int32_t id = v.find(extra);
    if (id >= 0 && v.types[id] == TokenType::kControl &&
        std::find(v.eog_ids.begin(), v.eog_ids.end(), id) == v.eog_ids.end())
      v.eog_ids.push_back(id);
  }
  const json post = tj.value("post_processor", json());
  v.add_bos = config.is_object() && config.contains("add_bos_token") && config["add_bos_token"].is_boolean()
                  ? config["add_bos_token"].get<bool>()
                  : post_processor_adds(post, bos);
  v.add_eos = config.is_object() && config.value("add_eos_token", false) == true;
  if (v.add_bos && v.bos_id < 0) fail("{}: add_bos_token is true but there is no bos_token", source);
  if (v.add_eos && v.eos_id < 0) fail("{}: add_eos_token is true but there is no eos_token", source);

  if (config.is_object() && config.contains("chat_template")) {
    const json& ct = config.at("chat_template");
    if (ct.is_string()) {
      v.chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {
      // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
      for (const json& e : ct)
        if (e.value("name", "") == "default" && e.contains("template"))
          v.chat_template = e["template"].get<std::string>();
    }
  }
}

}  // namespace

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_hf_json(const json& tj, const json& config,
                                                         const std::string& source) {
  BpeSpec spec;
  spec.source = source;
  const json& model = member(tj, "model", source, "tokenizer.json");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") fail("{}: model type '{}' is not supported (kvik reads BPE tokenizers)", source, type);
  const json& vocab_json = member(model, "vocab", source, "model");
  if (!vocab_json.is_object()) fail("{}: model.vocab is not an object", source);
  read_vocab(tj, vocab_json, spec);
  read_model_options(model, spec);
  read_pipeline(tj, spec);
  read_specials(tj, config, spec);
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_gguf(const GgufFile& gguf) {
  const std::string pre = gguf.get_string("tokenizer.ggml.pre").value_or("default");
  BpeSpec spec;
  spec.source = gguf.path();
  spec.pre_tokenizer = make_pre_tokenizer_for_gguf(pre);
  if (!spec.pre_tokenizer)
    fail("{}: tokenizer.ggml.pre '{}' is not supported (kvik knows llama-bpe, qwen2, gpt2)", gguf.path(), pre);
  const bool llama3 = spec.pre_tokenizer->name() == "llama3";
  spec.vocab = Vocab::from_gguf(gguf, -1, -1, -1, /*add_bos_default=*/llama3, false);
  spec.byte_level = true;
  spec.ignore_merges = llama3;
  if (spec.pre_tokenizer->name() == "qwen2") spec.normalizer.push_back({NormalizerStep::Kind::kNfc, {}, {}});

  const GgufValue& merges = gguf.require_array("tokenizer.ggml.merges", GgufType::STRING);
  spec.merges.reserve(merges.strings.size());
  for (size_t i = 0; i < merges.strings.size(); ++i) {
    const std::string_view s = merges.strings[i];
    const size_t sp = s.find(' ', 1);
    if (sp == std::string_view::npos)
      fail("{}: tokenizer.ggml.merges[{}] '{}' is not two tokens separated by a space", gguf.path(), i, s);
    spec.merges.emplace_back(std::string(s.substr(0, sp)), std::string(s.substr(sp + 1)));
  }
  for (int32_t id = 0; id < spec.vocab.size(); ++id) {
    const TokenType t = spec.vocab.types[id];
    if (t == TokenType::kControl || t == TokenType::kUserDefined)
      spec.added_tokens.push_back({id, spec.vocab.tokens[id], t == TokenType::kControl, false, false});
  }
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

}  // namespace kvik
