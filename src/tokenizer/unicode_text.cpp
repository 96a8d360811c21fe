#include "tokenizer/unicode_text.h"

#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace kvik {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0 when it is ill-formed. `*bad` receives the length
// of the maximal ill-formed subpart (at least 1) to replace with one U+FFFD (Unicode 15, §3.9 "U+FFFD
// substitution of maximal subparts").
size_t valid_seq(std::string_view s, size_t i, size_t* bad) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  *bad = 1;
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return 0;
    const unsigned char x = b(i + k);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (x < l || x > h) return 0;
    *bad = k + 1;
  }
  return n;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t bad;
    const size_t n = valid_seq(s, i, &bad);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  if (is_valid_utf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    size_t bad;
    const size_t n = valid_seq(s, i, &bad);
    if (n) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += bad;
    }
  }
  return out;
}

std::string nfc_normalize(std::string_view s) {
  bool ascii = true;
  for (char c : s) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(s);
  if (s.size() > static_cast<size_t>(INT32_MAX / 4)) fail("text of {} bytes is too long to normalize", s.size());

  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfc = unorm2_getNFCInstance(&err);
  if (U_FAILURE(err)) fail("ICU: NFC normalizer unavailable: {}", u_errorName(err));
  int32_t n16 = 0;
  std::vector<UChar> in(s.size() + 1);
  u_strFromUTF8(in.data(), static_cast<int32_t>(in.size()), &n16, s.data(), static_cast<int32_t>(s.size()), &err);
  if (U_FAILURE(err)) fail("ICU: invalid UTF-8 passed to NFC: {}", u_errorName(err));
  // NFC can grow a string (a few compatibility-free decompositions don't recompose); 3x is ICU's bound.
  std::vector<UChar> out(static_cast<size_t>(n16) * 3 + 16);
  const int32_t m = unorm2_normalize(nfc, in.data(), n16, out.data(), static_cast<int32_t>(out.size()), &err);
  if (U_FAILURE(err)) fail("ICU: NFC failed: {}", u_errorName(err));
  std::string res(static_cast<size_t>(m) * 3 + 4, '\0');
  int32_t n8 = 0;
  u_strToUTF8(res.data(), static_cast<int32_t>(res.size()), &n8, out.data(), m, &err);
  if (U_FAILURE(err)) fail("ICU: UTF-16 to UTF-8 failed: {}", u_errorName(err));
  res.resize(static_cast<size_t>(n8));
  return res;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  uint32_t extra = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    byte_to_cp_[b] = printable ? b : 256 + extra++;
    append_utf8(byte_to_utf8_[b], byte_to_cp_[b]);
  }
  cp_to_byte_.fill(-1);
  for (uint32_t b = 0; b < 256; ++b) cp_to_byte_[byte_to_cp_[b]] = static_cast<int16_t>(b);
}

void ByteLevelAlphabet::encode(std::string_view bytes, std::string& out) const {
  for (unsigned char c : bytes) out += byte_to_utf8_[c];
}

std::string ByteLevelAlphabet::decode(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = std::min(utf8_len(c), text.size() - i);
    uint32_t cp = n == 1 ? c : 0xFFFFFFFF;
    if (n == 2) cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
    if (cp < cp_to_byte_.size() && cp_to_byte_[cp] >= 0) {
      out += static_cast<char>(cp_to_byte_[cp]);
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

const ByteLevelAlphabet& byte_level_alphabet() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

}  // namespace kvik
