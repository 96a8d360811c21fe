// BPE tokenizer as Hugging Face `tokenizers` runs a tokenizer.json with model.type = "BPE", and as
// llama.cpp runs a GGUF with tokenizer.ggml.model = "gpt2":
//   1. added tokens (special ones only with parse_special) are cut out of the text first, longest first
//      at the leftmost position, and emitted as their ids;
//   2. each remaining section is normalized (NFC for Qwen; Prepend "▁" + Replace " "->"▁" for Llama 2);
//   3. a per-family PreTokenizer cuts the section into words (Llama 3 / Qwen2 / GPT-2 regexes, Metaspace);
//   4. byte-level tokenizers map each word's bytes to GPT-2's printable alphabet ("Ġ" for a space);
//   5. a word that is itself a token stays whole when ignore_merges (Llama 3); otherwise its characters are
//      merged pairwise, always the pair with the lowest merge rank first (leftmost on ties);
//   6. characters that are not tokens become <0xNN> byte tokens (byte_fallback) or UNK.
// Decoding reverses 4 (byte-level) or turns "▁" back into spaces and <0xNN> into bytes.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <unordered_map>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kvik {

class GgufWriter;

// tokenizer.json "normalizer": the steps kvik supports, applied in order.
struct NormalizerStep {
  enum class Kind { kNfc, kPrepend, kReplace, kLowercase };
  Kind kind = Kind::kNfc;
  std::string a, b;  // kPrepend: a; kReplace: a -> b
};

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;  // only split out with parse_special
  bool lstrip = false, rstrip = false;
};

struct BpeSpec {
  Vocab vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  std::vector<AddedToken> added_tokens;
  std::vector<NormalizerStep> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;  // required
  bool byte_level = true;                       // step 4 and its decoder
  bool ignore_merges = false;                   // step 5
  bool byte_fallback = false;                   // step 6: <0xNN> tokens
  bool fuse_unk = false;                        // consecutive UNKs become one
  std::string metaspace = "\xE2\x96\x81";       // decoded as a space when !byte_level
  bool strip_leading_space = false;             // decoder drops one leading space (Strip / Metaspace prepend)
  std::string source;                           // file name, for error messages
};

class BpeTokenizer : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeSpec spec);  // throws kvik::Error naming the merge or token at fault

  // tokenizer.json (+ tokenizer_config.json, may be null). `source` names the files in errors.
  static std::unique_ptr<BpeTokenizer> from_hf_json(const nlohmann::json& tokenizer_json,
                                                    const nlohmann::json& tokenizer_config, const std::string& source);
  // GGUF tokenizer.ggml.model = "gpt2" with tokenizer.ggml.pre and tokenizer.ggml.merges.
  static std::unique_ptr<BpeTokenizer> from_gguf(const GgufFile& gguf);

  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override;
  std::string token_to_piece(int32_t id) const override;
  bool strips_space_after_bos() const override { return strip_leading_space_; }

  const PreTokenizer& pre_tokenizer() const { return *pre_tokenizer_; }
  // The tokenizer.ggml.pre name llama.cpp knows this pre-tokenizer by ("llama-bpe", "qwen2", "gpt2"); empty for a
  // tokenizer that cannot go into a GGUF as "gpt2" (not byte-level, or a pre-tokenizer llama.cpp has no name for).
  std::string gguf_pre_name() const;
  bool byte_level() const { return byte_level_; }
  // Writes the tokenizer.ggml.* keys llama.cpp reads (model "gpt2", pre, tokens, token_type, merges, special
  // ids, chat template), so a Hugging Face tokenizer can travel inside a GGUF. Byte-level families only.
  // pad_to > vocab size: the token list grows to pad_to with "[PAD<id>]" unused tokens, as convert_hf_to_gguf.py
  // pads it to config.json's vocab_size (embedding rows past the tokenizer's last id).
  void write_gguf_metadata(GgufWriter& w, int64_t pad_to = 0) const;

 private:
  struct MergeRule {
    int32_t rank;
    int32_t merged;
  };
  struct Section {
    int32_t token = -1;  // an added token, or -1 for text [offset, offset + length)
    size_t offset = 0, length = 0;
  };

  std::vector<Section> split_added(std::string_view text, bool parse_special) const;
  std::string normalize(std::string_view text) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::vector<NormalizerStep> normalizer_;
  bool byte_level_, ignore_merges_, byte_fallback_, fuse_unk_, strip_leading_space_;
  std::string metaspace_;
  std::vector<std::pair<int32_t, int32_t>> merge_pairs_;  // by rank
  std::unordered_map<uint64_t, MergeRule> merges_;        // (left id << 32 | right id) -> rank, merged id
  std::vector<AddedToken> added_;
  std::vector<int8_t> added_index_;                            // per id: 1 when an added token
  std::array<std::vector<int32_t>, 256> added_by_first_byte_;  // indexes into added_, longest first
  std::array<int32_t, 256> byte_tokens_{};                     // <0xNN> ids, -1 when absent
  std::vector<std::string> pieces_;                            // token_to_piece() for every id

  // Words repeat; a bounded cache of their ids (cleared when full, so memory stays bounded).
  static constexpr size_t kCacheCapacity = 1 << 15;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace kvik
