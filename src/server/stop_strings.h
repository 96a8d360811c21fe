// Stop strings matched on detokenized text, for streaming: text goes in as the detokenizer produces it, and
// only text that can no longer be the start of a stop string comes out. The longest suffix of the unsent
// text that is a prefix of some stop string is held back, so a partial stop string never reaches the client.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvik::server {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends `text`; returns the text now safe to send. After a match, returns the text before the stop
  // string and stopped() is true; later calls return "".
  std::string push(std::string_view text);
  // The held-back text at the end of the stream (no stop string matched).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // text received but not yet sent
  bool stopped_ = false;
};

// Length of the longest suffix of `text` that is a proper prefix of one of `stops` (0 when none).
size_t partial_stop_suffix(std::string_view text, const std::vector<std::string>& stops);

}  // namespace kvik::server
