// The vocabulary as a byte trie, stored as a pre-order array: a mask walk visits each shared prefix once
// and skips a whole subtree the moment the grammar rejects its first byte (node.skip).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvik {
class Tokenizer;
}

namespace kvik::structured {

class VocabTrie {
 public:
  struct Node {
    uint32_t skip;       // index of the next node outside this node's subtree
    uint32_t tok_begin;  // tokens whose bytes end here: token_ids_[tok_begin, tok_end)
    uint32_t tok_end;
    uint16_t depth;  // 1 for a first byte; the parent's state is at depth − 1
    uint8_t byte;
  };

  // token_bytes[id] are the bytes token `id` appends; an empty string marks a token that structured output
  // never allows (control tokens such as BOS/EOS, which the engine handles by id).
  explicit VocabTrie(std::vector<std::string> token_bytes);

  // Every token's piece (Tokenizer::token_to_piece), control and unknown tokens left empty.
  static std::vector<std::string> token_bytes_of(const Tokenizer& tokenizer);

  int32_t vocab_size() const { return static_cast<int32_t>(token_bytes_.size()); }
  const std::string& token_bytes(int32_t id) const { return token_bytes_[id]; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  int max_depth() const { return max_depth_; }

 private:
  std::vector<std::string> token_bytes_;
  std::vector<Node> nodes_;
  std::vector<int32_t> token_ids_;
  int max_depth_ = 0;
};

}  // namespace kvik::structured
