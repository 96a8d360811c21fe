// Text <-> token ids. One class per tokenizer family (SentencePiece-style "llama", BPE from tokenizer.json
// or GGUF "gpt2"); load_tokenizer() picks one for a GGUF file or a Hugging Face directory.
//
// The vocabulary part every family shares (token texts, types, special ids) lives in `Vocab`, read from
// the GGUF once and validated there: a GGUF file is untrusted input.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvik {

class GgufFile;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct TransparentStringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Vocab {
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens; an empty text becomes "[EMPTY_<id>]" as in llama.cpp
  std::vector<float> scores;        // tokenizer.ggml.scores, 0 when absent
  std::vector<TokenType> types;     // tokenizer.ggml.token_type, kNormal when absent
  // text -> id; when two tokens share a text the later id wins (llama.cpp does the same).
  std::unordered_map<std::string, int32_t, TransparentStringHash, std::equal_to<>> token_to_id;

  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  std::vector<int32_t> eog_ids;  // eos plus eot/eom when the file names them
  bool add_bos = false;
  bool add_eos = false;
  std::string chat_template;  // Jinja source (tokenizer_config.json chat_template / tokenizer.chat_template)

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  int32_t find(std::string_view text) const {
    auto it = token_to_id.find(text);
    return it == token_to_id.end() ? -1 : it->second;
  }

  // Reads tokens/scores/token_type and the special ids. `bos/eos/unk_default` are the family's defaults
  // (llama: 1, 2, 0), used when the key is absent. Throws kvik::Error naming the key on bad input.
  static Vocab from_gguf(const GgufFile& gguf, int32_t bos_default, int32_t eos_default, int32_t unk_default,
                         bool add_bos_default, bool add_eos_default);
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // add_bos: prepend BOS (callers usually pass add_bos()). parse_special: control/unknown token texts in
  // `text` ("<s>") become their ids; otherwise they are tokenized as plain text.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const = 0;
  // Concatenated pieces; skip_special drops control/unknown tokens. See strips_space_after_bos().
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special) const = 0;
  // The bytes this token contributes when it follows other tokens (byte tokens give one raw byte, so a
  // piece need not be valid UTF-8). Control tokens give their text ("</s>"). Throws on an id outside the vocab.
  virtual std::string token_to_piece(int32_t id) const = 0;
  // True when encode() prepends a space to the text after BOS, so decode() drops one leading space from
  // the token directly after a leading BOS. StreamingDetokenizer applies the same rule.
  virtual bool strips_space_after_bos() const { return false; }

  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  int32_t unk_id() const { return vocab_.unk_id; }
  int32_t pad_id() const { return vocab_.pad_id; }
  bool add_bos() const { return vocab_.add_bos; }
  bool add_eos() const { return vocab_.add_eos; }
  int32_t vocab_size() const { return vocab_.size(); }
  // Control and unknown tokens: what decode(skip_special=true) leaves out.
  bool is_special(int32_t id) const;
  // End of generation: EOS (and EOT/EOM when the file has them).
  bool is_eog(int32_t id) const;
  // The ids is_eog() accepts: the stop tokens an engine serving this model is built with.
  std::vector<int32_t> end_of_generation_ids() const {
    if (vocab_.eog_ids.empty() && vocab_.eos_id >= 0) return {vocab_.eos_id};
    return vocab_.eog_ids;
  }
  TokenType token_type(int32_t id) const;
  const std::string& token_text(int32_t id) const;  // throws kvik::Error outside the vocab
  const Vocab& vocab() const { return vocab_; }
  const std::string& chat_template() const { return vocab_.chat_template; }
  // Replaces the model's chat template (`serve --chat-template FILE`).
  void set_chat_template(std::string jinja) { vocab_.chat_template = std::move(jinja); }
  // The text of BOS / EOS, empty when the vocab has none (chat templates use them as bos_token, eos_token).
  std::string bos_token() const { return vocab_.bos_id >= 0 ? vocab_.tokens[vocab_.bos_id] : std::string(); }
  std::string eos_token() const { return vocab_.eos_id >= 0 ? vocab_.tokens[vocab_.eos_id] : std::string(); }

 protected:
  explicit Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
  void check_id(int32_t id) const;

  Vocab vocab_;
};

// Dispatches on tokenizer.ggml.model ("llama": SentencePiece, "gpt2": byte-level BPE); throws kvik::Error
// for a missing or unsupported value.
std::unique_ptr<Tokenizer> load_tokenizer_from_gguf(const GgufFile& gguf);

// A GGUF file, or a Hugging Face directory with tokenizer.json (+ tokenizer_config.json for bos/eos,
// add_bos_token and chat_template). Throws kvik::Error naming the file that is missing or wrong.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

}  // namespace kvik
