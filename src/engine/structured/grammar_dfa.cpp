#include "engine/structured/grammar_dfa.h"

#include <set>

#include "core/error.h"

namespace kvik::structured {

namespace {

using Stack = std::vector<uint32_t>;
using StackSet = std::set<Stack>;

// Bounds that keep one byte step of a hostile grammar cheap.
constexpr size_t kMaxExpansions = 200000;
constexpr size_t kMaxStackDepth = 4096;

// Expands stacks until every top is a byte set (or the stack is empty: the sentence may end here):
// a rule reference on top is replaced by each of its alternatives, the reference's continuation kept below
// unless it is at the end of its sequence (a tail call, so right recursion does not grow the stack).
void expand(const Grammar& g, Stack s, StackSet& out) {
  std::vector<Stack> todo{std::move(s)};
  StackSet seen;
  while (!todo.empty()) {
    Stack cur = std::move(todo.back());
    todo.pop_back();
    if (!seen.insert(cur).second) continue;
    if (seen.size() > kMaxExpansions)
      fail("grammar: more than {} stacks in one step (the grammar is too ambiguous)", kMaxExpansions);
    if (cur.size() > kMaxStackDepth) fail("grammar: nesting deeper than {} rules", kMaxStackDepth);
    if (cur.empty() || g.elems[cur.back()].type == ElemType::kBytes) {
      out.insert(std::move(cur));
      continue;
    }
    const uint32_t pos = cur.back();
    cur.pop_back();
    if (!g.is_end_of_sequence(pos + 1)) cur.push_back(pos + 1);
    for (uint32_t a : g.alternatives(g.elems[pos].value)) {
      Stack t = cur;
      if (!g.is_end_of_sequence(a)) t.push_back(a);
      todo.push_back(std::move(t));
    }
  }
}

std::vector<uint32_t> serialize(const StackSet& set) {
  std::vector<uint32_t> key{static_cast<uint32_t>(set.size())};
  for (const Stack& s : set) {
    key.push_back(static_cast<uint32_t>(s.size()));
    key.insert(key.end(), s.begin(), s.end());
  }
  return key;
}

template <typename Fn>
void for_each_stack(const std::vector<uint32_t>& key, Fn&& fn) {
  size_t i = 1;
  for (uint32_t n = 0; n < key[0]; ++n) {
    const uint32_t len = key[i++];
    fn(key.data() + i, len);
    i += len;
  }
}

}  // namespace

GrammarDfa::GrammarDfa(Grammar grammar, std::shared_ptr<const VocabTrie> trie)
    : grammar_(std::move(grammar)), trie_(std::move(trie)) {
  walk_.resize(static_cast<size_t>(trie_->max_depth()) + 1);
}

size_t GrammarDfa::num_states() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.size();
}

void GrammarDfa::reset() {
  keys_.clear();
  accepting_.clear();
  trans_.clear();
  ids_.clear();
  masks_.clear();
  ++generation_;
}

int32_t GrammarDfa::intern(std::vector<uint32_t> key) {
  std::string bytes(reinterpret_cast<const char*>(key.data()), key.size() * sizeof(uint32_t));
  auto [it, inserted] = ids_.emplace(std::move(bytes), static_cast<int32_t>(keys_.size()));
  if (!inserted) return it->second;
  bool acc = false;
  for_each_stack(key, [&](const uint32_t*, uint32_t len) { acc |= len == 0; });
  keys_.push_back(std::move(key));
  accepting_.push_back(acc);
  trans_.resize(trans_.size() + 256, kUnknown);
  return it->second;
}

int32_t GrammarDfa::compute(int32_t s, uint8_t b) {
  StackSet out;
  const std::vector<uint32_t> key = keys_[s];  // copy: intern() may grow keys_
  for_each_stack(key, [&](const uint32_t* st, uint32_t len) {
    if (len == 0) return;
    const uint32_t top = st[len - 1];
    const Elem& e = grammar_.elems[top];
    if (e.type != ElemType::kBytes || !grammar_.bytesets[e.value].test(b)) return;
    Stack next(st, st + len - 1);
    if (!grammar_.is_end_of_sequence(top + 1)) next.push_back(top + 1);
    expand(grammar_, std::move(next), out);
  });
  const int32_t t = out.empty() ? kDead : intern(serialize(out));
  trans_[static_cast<size_t>(s) * 256 + b] = t;
  return t;
}

int32_t GrammarDfa::resolve(DfaCursor& c) {
  if (c.generation != generation_ || c.state < 0) {
    if (keys_.size() >= kMaxStates) reset();
    c.state = intern(c.key);
    c.generation = generation_;
  }
  return c.state;
}

DfaCursor GrammarDfa::start() {
  std::lock_guard<std::mutex> lock(mu_);
  StackSet out;
  for (uint32_t a : grammar_.alternatives(grammar_.root)) {
    Stack s;
    if (!grammar_.is_end_of_sequence(a)) s.push_back(a);
    expand(grammar_, std::move(s), out);
  }
  DfaCursor c;
  c.key = serialize(out);
  resolve(c);
  return c;
}

bool GrammarDfa::advance(DfaCursor& c, std::string_view bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (keys_.size() >= kMaxStates) reset();
  int32_t s = resolve(c);
  for (char ch : bytes) {
    s = next(s, static_cast<uint8_t>(ch));
    if (s < 0) return false;
  }
  c.state = s;
  c.key = keys_[s];
  return true;
}

bool GrammarDfa::accepting(DfaCursor& c) {
  std::lock_guard<std::mutex> lock(mu_);
  return accepting_[resolve(c)];
}

std::shared_ptr<const TokenMask> GrammarDfa::mask(DfaCursor& c) {
  std::lock_guard<std::mutex> lock(mu_);
  if (keys_.size() >= kMaxStates) reset();
  const int32_t s = resolve(c);
  if (auto it = masks_.find(s); it != masks_.end()) return it->second;
  auto m = std::make_shared<TokenMask>();
  m->bits.assign((static_cast<size_t>(trie_->vocab_size()) + 63) / 64, 0);
  m->accepting = accepting_[s];
  const auto& nodes = trie_->nodes();
  const auto& ids = trie_->token_ids();
  walk_[0] = s;
  for (size_t i = 0; i < nodes.size();) {
    const VocabTrie::Node& n = nodes[i];
    const int32_t t = next(walk_[n.depth - 1], n.byte);
    if (t < 0) {
      i = n.skip;
      continue;
    }
    walk_[n.depth] = t;
    for (uint32_t k = n.tok_begin; k < n.tok_end; ++k) {
      const auto id = static_cast<size_t>(ids[k]);
      m->bits[id >> 6] |= uint64_t{1} << (id & 63);
      m->any = true;
    }
    ++i;
  }
  const size_t bytes = m->bits.size() * sizeof(uint64_t);
  if ((masks_.size() + 1) * bytes > kMaxMaskBytes) masks_.clear();
  masks_.emplace(s, m);
  return m;
}

}  // namespace kvik::structured
