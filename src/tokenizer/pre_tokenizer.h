// Pre-tokenizers: how a byte-level or SentencePiece-style BPE tokenizer cuts normalized text into words
// before merging (BPE never merges across a word boundary). One class per family, each with the split
// regex its tokenizer.json (or llama.cpp's tokenizer.ggml.pre) names:
//   Llama 3: digits in groups of three    `\p{N}{1,3}`
//   Qwen2/3: every digit on its own       `\p{N}`
//   GPT-2:   letters/digits with one leading space ` ?\p{L}+| ?\p{N}+`
// Regexes run through PCRE2 in UTF + UCP mode so \p{L}, \p{N} and \s follow Unicode properties.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kvik {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the words of one text section (the text between two added tokens, already normalized; valid
  // UTF-8). `first_section`: the section starts the input (Metaspace's prepend_scheme "first" needs it).
  virtual void split(std::string_view text, bool first_section, std::vector<std::string_view>& words,
                     std::string& scratch) const = 0;
  virtual std::string_view name() const = 0;
};

// Splits with one regex, HF's Split(behavior = Isolated): every match is a word, and so is every gap
// between matches (the family regexes below leave none).
class RegexPreTokenizer : public PreTokenizer {
 public:
  // Throws kvik::Error with PCRE2's message and the offset when `pattern` does not compile.
  explicit RegexPreTokenizer(std::string pattern);
  ~RegexPreTokenizer() override;
  RegexPreTokenizer(const RegexPreTokenizer&) = delete;
  RegexPreTokenizer& operator=(const RegexPreTokenizer&) = delete;

  void split(std::string_view text, bool first_section, std::vector<std::string_view>& words,
             std::string& scratch) const override;
  std::string_view name() const override { return "regex"; }
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// Llama 3 / 3.1 / 3.2 / 3.3 (tokenizer.ggml.pre "llama-bpe").
class Llama3PreTokenizer : public RegexPreTokenizer {
 public:
  // The regex as tokenizer.json writes it (used to recognise the family).
  static constexpr std::string_view kHfPattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  Llama3PreTokenizer();
  std::string_view name() const override { return "llama3"; }
};

// Qwen2, Qwen2.5, Qwen3 (tokenizer.ggml.pre "qwen2").
class Qwen2PreTokenizer : public RegexPreTokenizer {
 public:
  static constexpr std::string_view kHfPattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  Qwen2PreTokenizer();
  std::string_view name() const override { return "qwen2"; }
};

// GPT-2 (HF ByteLevel pre-tokenizer with use_regex; tokenizer.ggml.pre "gpt2").
class Gpt2PreTokenizer : public RegexPreTokenizer {
 public:
  static constexpr std::string_view kHfPattern =
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  Gpt2PreTokenizer();
  std::string_view name() const override { return "gpt2"; }
};

// SentencePiece-style word split (HF Metaspace): spaces become U+2581 "▁", a "▁" is prepended
// (always, or only to the first section), and with `split` each word starts at a "▁".
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split);
  void split(std::string_view text, bool first_section, std::vector<std::string_view>& words,
             std::string& scratch) const override;
  std::string_view name() const override { return "metaspace"; }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

// No pre-tokenizer: the whole section is one word (Llama 2's tokenizer.json, whose normalizer already
// turned spaces into "▁").
class WholeTextPreTokenizer : public PreTokenizer {
 public:
  void split(std::string_view text, bool, std::vector<std::string_view>& words, std::string&) const override {
    if (!text.empty()) words.push_back(text);
  }
  std::string_view name() const override { return "none"; }
};

// The family class for a tokenizer.json Split regex; a regex kvik does not know becomes a plain
// RegexPreTokenizer (it still works when PCRE2 accepts it).
std::unique_ptr<PreTokenizer> make_regex_pre_tokenizer(std::string_view hf_pattern);
// The family class for llama.cpp's tokenizer.ggml.pre; nullptr for a name kvik does not know.
std::unique_ptr<PreTokenizer> make_pre_tokenizer_for_gguf(std::string_view pre);

}  // namespace kvik
