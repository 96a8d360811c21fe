#include "tokenizer/streaming_detokenizer.h"

namespace kvik {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The UTF-8 sequence at the start of `s` (non-empty): its length when valid; 0 when `s` is a proper prefix
// of a valid sequence (wait for more bytes); -k when the first k bytes are a maximal invalid subpart.
// Ranges from the Unicode standard, table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF.
int classify_utf8(std::string_view s) {
  const auto b0 = static_cast<uint8_t>(s[0]);
  if (b0 < 0x80) return 1;
  int need = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;  // continuation byte, C0/C1 or F5..FF as a lead
  }
  for (int k = 1; k <= need; ++k) {
    if (static_cast<size_t>(k) >= s.size()) return 0;
    const auto c = static_cast<uint8_t>(s[k]);
    const bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return -k;
  }
  return need + 1;
}

}  // namespace

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids,
                                           bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {
  num_ids_ = prompt_ids.size();
  starts_with_bos_ = !prompt_ids.empty() && prompt_ids.front() == tokenizer_.bos_id();
}

std::string StreamingDetokenizer::push(int32_t id) {
  if (num_ids_ == 0) starts_with_bos_ = id == tokenizer_.bos_id();
  const size_t position = num_ids_++;
  if (skip_special_ && tokenizer_.is_special(id)) return take_complete();
  std::string piece = tokenizer_.token_to_piece(id);
  // The same rule as decode(): the token right after a leading BOS loses the space encode() prepended.
  if (position == 1 && starts_with_bos_ && tokenizer_.strips_space_after_bos() && !piece.empty() &&
      piece.front() == ' ')
    piece.erase(0, 1);
  pending_ += piece;
  return take_complete();
}

std::string StreamingDetokenizer::take_complete() {
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const int n = classify_utf8(std::string_view(pending_).substr(i));
    if (n == 0) break;  // an incomplete character at the end: hold it
    if (n > 0) {
      out.append(pending_, i, n);
      i += n;
    } else {
      out += kReplacement;
      i += -n;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out = take_complete();
  if (!pending_.empty()) out += kReplacement;  // at most 3 bytes of one incomplete character
  pending_.clear();
  return out;
}

}  // namespace kvik
