// Text <-> token ids. One class per tokenizer family (SentencePiece-style "llama" now, byte-level BPE
// later); load_tokenizer_from_gguf() picks one from `tokenizer.ggml.model`.
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
  TokenType token_type(int32_t id) const;
  const std::string& token_text(int32_t id) const;  // throws kvik::Error outside the vocab
  const Vocab& vocab() const { return vocab_; }

 protected:
  explicit Tokenizer(Vocab vocab) : vocab_(std::move(vocab)) {}
  void check_id(int32_t id) const;

  Vocab vocab_;
};

// Dispatches on tokenizer.ggml.model; throws kvik::Error for a missing or unsupported value.
std::unique_ptr<Tokenizer> load_tokenizer_from_gguf(const GgufFile& gguf);

}  // namespace kvik
