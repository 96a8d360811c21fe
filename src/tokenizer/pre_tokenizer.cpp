#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include "core/error.h"

namespace kvik {

namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

// JS (and so @lenml/tokenizers, the reference) has no `(?i:...)`; transformers.js rewrites the contraction
// group to explicit character classes. We use the same form: PCRE2's caseless UCP matching would also
// accept U+017F "ſ" for "s" and U+212A "K" for "k".
constexpr std::string_view kContractionsHf = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
constexpr std::string_view kContractionsExplicit = "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))";

std::string explicit_case(std::string_view hf) {
  std::string s(hf);
  const size_t at = s.find(kContractionsHf);
  if (at != std::string::npos) s.replace(at, kContractionsHf.size(), kContractionsExplicit);
  return s;
}

}  // namespace

RegexPreTokenizer::RegexPreTokenizer(std::string pattern) : pattern_(std::move(pattern)) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    fail("pre-tokenizer regex does not compile at offset {}: {} (pattern: {})", offset,
         reinterpret_cast<const char*>(msg), pattern_);
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: pcre2_match falls back to the interpreter
  code_ = code;
}

RegexPreTokenizer::~RegexPreTokenizer() { pcre2_code_free(as_code(code_)); }

void RegexPreTokenizer::split(std::string_view text, bool, std::vector<std::string_view>& words, std::string&) const {
  // Match data per call: one compiled regex serves every thread.
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(as_code(code_), nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, gap = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(as_code(code_), subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      fail("pre-tokenizer regex failed at byte {}: {}", pos, reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (b > gap) words.push_back(text.substr(gap, b - gap));
    if (e > b) {
      words.push_back(text.substr(b, e - b));
      pos = e;
    } else {
      // An empty match: step over one character.
      pos = b + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
      if (b > gap) gap = b;
      continue;
    }
    gap = e;
  }
  pcre2_match_data_free(md);
  if (gap < text.size()) words.push_back(text.substr(gap));
}

Llama3PreTokenizer::Llama3PreTokenizer() : RegexPreTokenizer(explicit_case(kHfPattern)) {}
Qwen2PreTokenizer::Qwen2PreTokenizer() : RegexPreTokenizer(explicit_case(kHfPattern)) {}
Gpt2PreTokenizer::Gpt2PreTokenizer() : RegexPreTokenizer(std::string(kHfPattern)) {}

MetaspacePreTokenizer::MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
    : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {
  if (replacement_.empty()) fail("Metaspace pre-tokenizer: empty replacement");
}

void MetaspacePreTokenizer::split(std::string_view text, bool first_section, std::vector<std::string_view>& words,
                                  std::string& scratch) const {
  // `scratch` owns the rewritten text; callers keep it alive while they use `words`.
  const size_t base = scratch.size();
  const bool prepend = prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && first_section);
  if (prepend && !text.starts_with(' ') && !text.starts_with(replacement_)) scratch += replacement_;
  for (char c : text) {
    if (c == ' ')
      scratch += replacement_;
    else
      scratch += c;
  }
  const std::string_view all = std::string_view(scratch).substr(base);
  if (!split_) {
    if (!all.empty()) words.push_back(all);
    return;
  }
  // MergedWithNext: each "▁" starts a new word.
  size_t start = 0;
  for (size_t at = all.find(replacement_, 1); at != std::string_view::npos; at = all.find(replacement_, at + 1)) {
    if (at > start) words.push_back(all.substr(start, at - start));
    start = at;
  }
  if (start < all.size()) words.push_back(all.substr(start));
}

std::unique_ptr<PreTokenizer> make_regex_pre_tokenizer(std::string_view hf_pattern) {
  if (hf_pattern == Llama3PreTokenizer::kHfPattern) return std::make_unique<Llama3PreTokenizer>();
  if (hf_pattern == Qwen2PreTokenizer::kHfPattern) return std::make_unique<Qwen2PreTokenizer>();
  if (hf_pattern == Gpt2PreTokenizer::kHfPattern) return std::make_unique<Gpt2PreTokenizer>();
  return std::make_unique<RegexPreTokenizer>(explicit_case(hf_pattern));
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer_for_gguf(std::string_view pre) {
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return std::make_unique<Llama3PreTokenizer>();
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return std::make_unique<Qwen2PreTokenizer>();
  if (pre == "gpt2" || pre == "default") return std::make_unique<Gpt2PreTokenizer>();
  return nullptr;
}

}  // namespace kvik
