// SentencePiece-style tokenizer (GGUF tokenizer.ggml.model = "llama"), token-for-token as llama.cpp's
// llm_tokenizer_spm:
//   1. special-token partition: user-defined token texts always, control/unknown texts only with
//      parse_special, are cut out of the text first (longest texts first) and emitted as their ids;
//   2. each remaining text fragment gets a leading space when add_space_prefix and it starts the text or
//      follows a special token, and every ' ' becomes U+2581 "▁";
//   3. the fragment is split into UTF-8 characters, and adjacent symbols are merged greedily: the pair whose
//      concatenation is the highest-scoring vocab token first, the leftmost pair on ties;
//   4. a final symbol that is not a vocab token falls back to byte tokens <0xNN> (or UNK when the vocab has
//      no such byte token). llama.cpp first tries to split it along a recorded merge, but a merge is only
//      recorded for a pair that is a vocab token, so a symbol that is not a token never has one.
#pragma once

#include <array>

#include "tokenizer/tokenizer.h"

namespace kvik {

class SpmTokenizer : public Tokenizer {
 public:
  explicit SpmTokenizer(const GgufFile& gguf);  // throws kvik::Error naming the key on a bad vocab

  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override;
  std::string token_to_piece(int32_t id) const override;
  bool strips_space_after_bos() const override { return add_space_prefix_; }

  bool add_space_prefix() const { return add_space_prefix_; }

 private:
  struct Fragment {
    int32_t token = -1;  // >= 0: an already-recognised special token; -1: raw text [offset, offset + length)
    size_t offset = 0;
    size_t length = 0;
  };

  std::vector<Fragment> partition_special(std::string_view text, bool parse_special) const;
  void tokenize_fragment(std::string_view escaped, std::vector<int32_t>& out) const;

  bool add_space_prefix_ = true;
  std::vector<int32_t> special_by_length_;    // control/user-defined/unknown ids, longest text first
  std::array<int32_t, 256> byte_to_token_{};  // <0xNN>, else the one-byte token, else UNK
  std::vector<std::string> pieces_;           // token_to_piece() for every id, built once
};

}  // namespace kvik
