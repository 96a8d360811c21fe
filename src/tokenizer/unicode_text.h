// UTF-8 helpers the byte-level and SentencePiece-style BPE tokenizers share: validation with U+FFFD
// replacement (PCRE2 must never see invalid UTF-8), NFC normalization (Qwen's tokenizer.json normalizer),
// and GPT-2's byte <-> printable-character map ("bytes_to_unicode": a space becomes "Ġ", a newline "Ċ").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvik {

// Length of the UTF-8 sequence that starts with byte `c` (1 for a stray continuation byte).
inline size_t utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

void append_utf8(std::string& out, uint32_t cp);

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool is_valid_utf8(std::string_view s);
// `s` with every ill-formed sequence replaced by U+FFFD (one per maximal ill-formed subpart, as the
// WHATWG decoder and JS TextDecoder do).
std::string sanitize_utf8(std::string_view s);

// Unicode Normalization Form C of valid UTF-8 text. ASCII text is returned as is without touching ICU.
std::string nfc_normalize(std::string_view s);

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100 + n.
class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();
  // Appends the alphabet form of every byte of `bytes`.
  void encode(std::string_view bytes, std::string& out) const;
  // The bytes of an alphabet string; characters outside the alphabet are copied through unchanged.
  std::string decode(std::string_view text) const;

 private:
  std::array<uint32_t, 256> byte_to_cp_{};
  std::array<std::string, 256> byte_to_utf8_;
  std::array<int16_t, 256 + 68> cp_to_byte_{};  // -1: not an alphabet character
};

const ByteLevelAlphabet& byte_level_alphabet();

}  // namespace kvik
