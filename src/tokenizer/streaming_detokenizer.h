// Turns generated token ids into text one token at a time, for streaming responses.
//
// A token's piece can end inside a UTF-8 character (byte-fallback tokens give one byte each), so push()
// returns only complete characters and holds the trailing incomplete bytes (at most 3) until a later token
// completes them. A byte sequence that cannot become valid UTF-8 is emitted as U+FFFD (one per maximal
// invalid subpart, as the Unicode standard recommends). flush() ends the stream.
//
// Invariant: the concatenation of every push() and flush() equals
// tokenizer.decode(prompt + generated, skip_special) minus decode(prompt, skip_special), whenever that
// text is valid UTF-8. Without a prompt that is decode(generated); the leading-space rule of decode()
// (Tokenizer::strips_space_after_bos) is applied to the token after a leading BOS, wherever it comes from.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "tokenizer/tokenizer.h"

namespace kvik {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, std::span<const int32_t> prompt_ids = {},
                                bool skip_special = true);

  std::string push(int32_t id);  // the newly completed text, possibly empty
  std::string flush();           // whatever is still held, incomplete sequences as U+FFFD

 private:
  // Moves every complete character (valid, or U+FFFD for invalid bytes) from pending_ to the result.
  std::string take_complete();

  const Tokenizer& tokenizer_;
  bool skip_special_;
  size_t num_ids_ = 0;  // ids seen so far, prompt included
  bool starts_with_bos_ = false;
  std::string pending_;  // bytes not yet emitted
};

}  // namespace kvik
