#include "tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <queue>

#include "core/error.h"
#include "formats/gguf.h"

namespace kvik {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's visible space

// Byte length of a UTF-8 sequence from its first byte's high nibble. Continuation and invalid lead bytes
// count as one-byte characters, so malformed input still splits into symbols (and reaches byte fallback).
size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// A run of bytes of the fragment; symbols form a doubly linked list as merges remove the right partner.
struct Symbol {
  int prev = -1;
  int next = -1;
  size_t offset = 0;
  size_t n = 0;  // 0 once merged into its left neighbour
};

struct Bigram {
  int left = 0;
  int right = 0;
  float score = 0;
  size_t size = 0;  // left.n + right.n when queued; a mismatch at pop time means the pair is stale
};

// Max-heap order: the higher score first, then the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

// Greedy highest-score-first merging of one escaped text fragment.
class SpmMerger {
 public:
  SpmMerger(const Vocab& vocab, std::string_view text) : vocab_(vocab), text_(text) {}

  void run(std::span<const int32_t, 256> byte_to_token, std::vector<int32_t>& out) {
    for (size_t offset = 0; offset < text_.size();) {
      const size_t n = std::min(utf8_len(static_cast<uint8_t>(text_[offset])), text_.size() - offset);
      const int index = static_cast<int>(symbols_.size());
      symbols_.push_back({index - 1, offset + n == text_.size() ? -1 : index + 1, offset, n});
      offset += n;
    }
    if (symbols_.empty()) return;

    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) try_add_bigram(i - 1, i);

    while (!queue_.empty()) {
      const Bigram bigram = queue_.top();
      queue_.pop();
      Symbol& left = symbols_[bigram.left];
      Symbol& right = symbols_[bigram.right];
      if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;

      left.n += right.n;
      right.n = 0;
      left.next = right.next;
      if (right.next >= 0) symbols_[right.next].prev = bigram.left;

      try_add_bigram(left.prev, bigram.left);
      try_add_bigram(bigram.left, left.next);
    }

    for (int i = 0; i != -1; i = symbols_[i].next) {
      const Symbol& s = symbols_[i];
      const std::string_view piece = text_.substr(s.offset, s.n);
      const int32_t id = vocab_.find(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      for (char c : piece) out.push_back(byte_to_token[static_cast<uint8_t>(c)]);
    }
  }

 private:
  void try_add_bigram(int left, int right) {
    if (left == -1 || right == -1) return;
    const size_t size = symbols_[left].n + symbols_[right].n;
    const int32_t id = vocab_.find(text_.substr(symbols_[left].offset, size));
    if (id < 0) return;
    queue_.push({left, right, vocab_.scores[id], size});
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue_;
};

// "<0xNN>" -> NN, or -1.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string unescape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, kSpaceMarker.size()) == kSpaceMarker) {
      out += ' ';
      i += kSpaceMarker.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace

SpmTokenizer::SpmTokenizer(const GgufFile& gguf)
    : Tokenizer(Vocab::from_gguf(gguf, /*bos*/ 1, /*eos*/ 2, /*unk*/ 0, /*add_bos*/ true, /*add_eos*/ false)) {
  add_space_prefix_ = gguf.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);

  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const TokenType t = vocab_.types[id];
    if (t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown)
      special_by_length_.push_back(id);
  }
  std::stable_sort(special_by_length_.begin(), special_by_length_.end(),
                   [&](int32_t a, int32_t b) { return vocab_.tokens[a].size() > vocab_.tokens[b].size(); });

  for (int b = 0; b < 256; ++b) {
    int32_t id = vocab_.find(fmt::format("<0x{:02X}>", b));
    if (id < 0) id = vocab_.find(std::string(1, static_cast<char>(b)));
    if (id < 0) id = vocab_.unk_id;
    if (id < 0)
      fail("{}: the vocabulary has no byte token <0x{:02X}> and tokenizer.ggml.unknown_token_id is not set",
           gguf.path(), b);
    byte_to_token_[b] = id;
  }

  // Pieces as llama.cpp's token_to_piece(special=true) renders them.
  pieces_.resize(vocab_.size());
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const std::string& text = vocab_.tokens[id];
    switch (vocab_.types[id]) {
      case TokenType::kNormal: pieces_[id] = unescape_spaces(text); break;
      case TokenType::kByte: {
        const int byte = parse_byte_token(text);
        pieces_[id] = byte >= 0 ? std::string(1, static_cast<char>(byte)) : text;
        break;
      }
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined: pieces_[id] = text; break;
      case TokenType::kUnused:
      case TokenType::kUndefined: break;
    }
  }
}

std::vector<SpmTokenizer::Fragment> SpmTokenizer::partition_special(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({-1, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t id : special_by_length_) {
    const TokenType t = vocab_.types[id];
    // User-defined tokens are cut out even without parse_special (llama.cpp follows HF tokenizers here).
    if (!parse_special && (t == TokenType::kControl || t == TokenType::kUnknown)) continue;
    const std::string& special = vocab_.tokens[id];
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view window = text.substr(0, f.offset + f.length);
      size_t pos = f.offset;
      for (size_t match; (match = window.find(special, pos)) != std::string_view::npos;) {
        if (match > pos) next.push_back({-1, pos, match - pos});
        next.push_back({id, 0, 0});
        pos = match + special.size();
      }
      if (pos < window.size()) next.push_back({-1, pos, window.size() - pos});
    }
    fragments.swap(next);
  }
  return fragments;
}

void SpmTokenizer::tokenize_fragment(std::string_view escaped, std::vector<int32_t>& out) const {
  SpmMerger(vocab_, escaped).run(byte_to_token_, out);
}

std::vector<int32_t> SpmTokenizer::encode(std::string_view text, bool add_bos, bool parse_special) const {
  std::vector<int32_t> out;
  if (add_bos) {
    if (vocab_.bos_id < 0) fail("encode: add_bos requested but the vocabulary has no BOS token");
    out.push_back(vocab_.bos_id);
  }
  std::string escaped;
  bool prev_special = true;  // the text start counts as "after a special token"
  for (const Fragment& f : partition_special(text, parse_special)) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    escaped.clear();
    if (add_space_prefix_ && prev_special) escaped += kSpaceMarker;
    for (char c : text.substr(f.offset, f.length)) {
      if (c == ' ')
        escaped += kSpaceMarker;
      else
        escaped += c;
    }
    tokenize_fragment(escaped, out);
    prev_special = false;
  }
  return out;
}

std::string SpmTokenizer::token_to_piece(int32_t id) const {
  check_id(id);
  return pieces_[id];
}

std::string SpmTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  const bool strip = add_space_prefix_ && !ids.empty() && ids[0] == vocab_.bos_id;
  for (size_t i = 0; i < ids.size(); ++i) {
    check_id(ids[i]);
    if (skip_special && is_special(ids[i])) continue;
    std::string_view piece = pieces_[ids[i]];
    if (strip && i == 1 && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    out += piece;
  }
  return out;
}

}  // namespace kvik
