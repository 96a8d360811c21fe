#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <queue>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "formats/gguf.h"
#include "tokenizer/unicode_text.h"

namespace kvik {

namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// "<0x0A>" -> 10, anything else -> -1.
int byte_token_value(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  int v = 0;
  for (char c : t.substr(3, 2)) {
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= c - '0';
    else if (c >= 'A' && c <= 'F')
      v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      v |= c - 'a' + 10;
    else
      return -1;
  }
  return v;
}

}  // namespace

BpeTokenizer::BpeTokenizer(BpeSpec spec)
    : Tokenizer(std::move(spec.vocab)),
      pre_tokenizer_(std::move(spec.pre_tokenizer)),
      normalizer_(std::move(spec.normalizer)),
      byte_level_(spec.byte_level),
      ignore_merges_(spec.ignore_merges),
      byte_fallback_(spec.byte_fallback),
      fuse_unk_(spec.fuse_unk),
      strip_leading_space_(spec.strip_leading_space),
      metaspace_(std::move(spec.metaspace)),
      added_(std::move(spec.added_tokens)) {
  if (!pre_tokenizer_) fail("{}: BPE tokenizer without a pre-tokenizer", spec.source);
  const int32_t n = vocab_.size();

  merges_.reserve(spec.merges.size());
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const auto& [a, b] = spec.merges[r];
    const int32_t ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
    if (ia < 0 || ib < 0 || im < 0)
      fail("{}: merge {} '{} {}': {} is not in the vocabulary", spec.source, r, a, b,
           ia < 0   ? "'" + a + "'"
           : ib < 0 ? "'" + b + "'"
                    : "'" + a + b + "'");
    // The first (lowest-rank) rule for a pair wins, as in HF.
    merges_.try_emplace(pair_key(ia, ib), MergeRule{static_cast<int32_t>(r), im});
    merge_pairs_.emplace_back(ia, ib);
  }

  added_index_.assign(n, 0);
  for (size_t i = 0; i < added_.size(); ++i) {
    const AddedToken& t = added_[i];
    if (t.id < 0 || t.id >= n)
      fail("{}: added token '{}' has id {} outside the vocabulary", spec.source, t.content, t.id);
    if (t.content.empty()) fail("{}: added token {} has empty content", spec.source, t.id);
    added_index_[t.id] = 1;
    added_by_first_byte_[static_cast<unsigned char>(t.content[0])].push_back(static_cast<int32_t>(i));
  }
  for (auto& list : added_by_first_byte_)
    std::stable_sort(list.begin(), list.end(),
                     [&](int32_t x, int32_t y) { return added_[x].content.size() > added_[y].content.size(); });

  byte_tokens_.fill(-1);
  if (byte_fallback_)
    for (int v = 0; v < 256; ++v) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", v);
      byte_tokens_[v] = vocab_.find(name);
    }

  pieces_.resize(n);
  const ByteLevelAlphabet& alphabet = byte_level_alphabet();
  for (int32_t id = 0; id < n; ++id) {
    const std::string& text = vocab_.tokens[id];
    if (added_index_[id] || vocab_.types[id] == TokenType::kControl || vocab_.types[id] == TokenType::kUserDefined) {
      pieces_[id] = text;
    } else if (byte_level_) {
      pieces_[id] = alphabet.decode(text);
    } else if (vocab_.types[id] == TokenType::kByte && byte_token_value(text) >= 0) {
      pieces_[id] = std::string(1, static_cast<char>(byte_token_value(text)));
    } else {
      std::string p;
      for (size_t i = 0; i < text.size();) {
        if (std::string_view(text).substr(i).starts_with(metaspace_)) {
          p += ' ';
          i += metaspace_.size();
        } else {
          p += text[i++];
        }
      }
      pieces_[id] = std::move(p);
    }
  }
}

std::vector<BpeTokenizer::Section> BpeTokenizer::split_added(std::string_view text, bool parse_special) const {
  std::vector<Section> sections;
  size_t start = 0;
  for (size_t i = 0; i < text.size();) {
    int32_t hit = -1;
    for (int32_t k : added_by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const AddedToken& t = added_[k];
      if (t.special && !parse_special) continue;
      if (text.substr(i).starts_with(t.content)) {
        hit = k;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > start) sections.push_back({-1, start, i - start});
    sections.push_back({hit, i, added_[hit].content.size()});
    i += added_[hit].content.size();
    start = i;
  }
  if (start < text.size()) sections.push_back({-1, start, text.size() - start});

  // lstrip / rstrip: the added token swallows the whitespace beside it.
  const auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  };
  for (size_t s = 0; s < sections.size(); ++s) {
    if (sections[s].token < 0) continue;
    const AddedToken& t = added_[sections[s].token];
    if (t.lstrip && s > 0 && sections[s - 1].token < 0) {
      Section& p = sections[s - 1];
      while (p.length > 0 && is_space(text[p.offset + p.length - 1])) --p.length;
    }
    if (t.rstrip && s + 1 < sections.size() && sections[s + 1].token < 0) {
      Section& q = sections[s + 1];
      while (q.length > 0 && is_space(text[q.offset])) ++q.offset, --q.length;
    }
  }
  for (Section& s : sections)
    if (s.token >= 0) s.token = added_[s.token].id;
  return sections;
}

std::string BpeTokenizer::normalize(std::string_view text) const {
  std::string s(text);
  for (const NormalizerStep& step : normalizer_) {
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc: s = nfc_normalize(s); break;
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s = step.a + s;
        break;
      case NormalizerStep::Kind::kReplace: {
        std::string r;
        for (size_t i = 0; i < s.size();) {
          if (std::string_view(s).substr(i).starts_with(step.a)) {
            r += step.b;
            i += step.a.size();
          } else {
            r += s[i++];
          }
        }
        s = std::move(r);
        break;
      }
      case NormalizerStep::Kind::kLowercase:
        for (char& c : s)
          if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        break;
    }
  }
  return s;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view raw, bool add_bos, bool parse_special) const {
  const std::string text = sanitize_utf8(raw);
  std::vector<int32_t> out;
  if (add_bos && vocab_.bos_id >= 0) out.push_back(vocab_.bos_id);
  std::vector<std::string_view> words;
  std::string scratch, mapped;
  bool first = true;
  for (const Section& s : split_added(text, parse_special)) {
    if (s.token >= 0) {
      out.push_back(s.token);
      first = false;
      continue;
    }
    if (s.length == 0) continue;
    const std::string normalized = normalize(std::string_view(text).substr(s.offset, s.length));
    if (normalized.empty()) continue;
    words.clear();
    scratch.clear();
    scratch.reserve(normalized.size() * 2 + 8);  // Metaspace writes here; no reallocation while views live
    pre_tokenizer_->split(normalized, first, words, scratch);
    first = false;
    for (std::string_view w : words) {
      if (byte_level_) {
        mapped.clear();
        byte_level_alphabet().encode(w, mapped);
        encode_word(mapped, out);
      } else {
        encode_word(w, out);
      }
    }
  }
  if (vocab_.add_eos && vocab_.eos_id >= 0) out.push_back(vocab_.eos_id);
  return out;
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const int32_t id = vocab_.find(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kCacheCapacity) cache_.clear();
  cache_.emplace(std::string(word), std::move(ids));
}

void BpeTokenizer::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // Symbols in a doubly linked list; a merge keeps the left symbol (and its original index, the tie-break).
  struct Symbol {
    int32_t id;
    int prev, next;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(utf8_len(static_cast<unsigned char>(word[i])), word.size() - i);
    const std::string_view ch = word.substr(i, n);
    i += n;
    const int32_t id = vocab_.find(ch);
    if (id >= 0) {
      sym.push_back({id, 0, 0});
    } else if (byte_fallback_ && std::all_of(ch.begin(), ch.end(), [&](char c) {
                 return byte_tokens_[static_cast<unsigned char>(c)] >= 0;
               })) {
      for (char c : ch) sym.push_back({byte_tokens_[static_cast<unsigned char>(c)], 0, 0});
    } else if (vocab_.unk_id >= 0) {
      if (!(fuse_unk_ && !sym.empty() && sym.back().id == vocab_.unk_id)) sym.push_back({vocab_.unk_id, 0, 0});
    }
    // No token, no byte fallback, no UNK: HF drops the character too.
  }
  const int m = static_cast<int>(sym.size());
  for (int i = 0; i < m; ++i) {
    sym[i].prev = i - 1;
    sym[i].next = i + 1 < m ? i + 1 : -1;
  }

  struct Candidate {
    int32_t rank;
    int left;
    int32_t left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto push = [&](int left) {
    if (left < 0 || sym[left].next < 0) return;
    const int right = sym[left].next;
    auto it = merges_.find(pair_key(sym[left].id, sym[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, sym[left].id, sym[right].id});
  };
  for (int i = 0; i + 1 < m; ++i) push(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = sym[c.left];
    if (left.id != c.left_id || left.next < 0 || sym[left.next].id != c.right_id) continue;  // stale
    const int right = left.next;
    left.id = merges_.at(pair_key(c.left_id, c.right_id)).merged;
    left.next = sym[right].next;
    if (left.next >= 0) sym[left.next].prev = c.left;
    sym[right].id = -1;
    push(left.prev);
    push(c.left);
  }
  for (int i = m > 0 ? 0 : -1; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

std::string BpeTokenizer::token_to_piece(int32_t id) const {
  check_id(id);
  return pieces_[id];
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    check_id(id);
    if (skip_special && is_special(id)) continue;
    out += pieces_[id];
  }
  if (strip_leading_space_ && out.starts_with(' ')) out.erase(0, 1);
  return out;
}

std::string BpeTokenizer::gguf_pre_name() const {
  if (!byte_level_) return {};
  const std::string_view family = pre_tokenizer_->name();
  return family == "llama3" ? "llama-bpe" : family == "qwen2" ? "qwen2" : family == "gpt2" ? "gpt2" : "";
}

void BpeTokenizer::write_gguf_metadata(GgufWriter& w, int64_t pad_to) const {
  const std::string pre = gguf_pre_name();
  if (pre.empty())
    fail("write_gguf_metadata: {} pre-tokenizer '{}' has no tokenizer.ggml.pre name",
         byte_level_ ? "byte-level" : "non-byte-level", pre_tokenizer_->name());
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string("tokenizer.ggml.pre", pre);
  std::vector<std::string> tokens = vocab_.tokens;
  std::vector<int32_t> types(vocab_.types.size());
  for (size_t i = 0; i < types.size(); ++i) types[i] = static_cast<int32_t>(vocab_.types[i]);
  for (int64_t i = static_cast<int64_t>(tokens.size()); i < pad_to; ++i) {
    tokens.push_back(fmt::format("[PAD{}]", i));
    types.push_back(static_cast<int32_t>(TokenType::kUnused));
  }
  w.set_array_string("tokenizer.ggml.tokens", tokens);
  w.set_array_i32("tokenizer.ggml.token_type", types);
  std::vector<std::string> merges;
  merges.reserve(merge_pairs_.size());
  for (const auto& [a, b] : merge_pairs_) merges.push_back(vocab_.tokens[a] + " " + vocab_.tokens[b]);
  w.set_array_string("tokenizer.ggml.merges", merges);
  if (vocab_.bos_id >= 0) w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab_.bos_id));
  if (vocab_.eos_id >= 0) w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab_.eos_id));
  if (vocab_.pad_id >= 0) w.set_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(vocab_.pad_id));
  w.set_bool("tokenizer.ggml.add_bos_token", vocab_.add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", vocab_.add_eos);
  if (!vocab_.chat_template.empty()) w.set_string("tokenizer.chat_template", vocab_.chat_template);
}

}  // namespace kvik
