#include "server/stop_strings.h"

#include <algorithm>
#include <utility>

namespace kvik::server {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

size_t partial_stop_suffix(std::string_view text, const std::vector<std::string>& stops) {
  size_t best = 0;
  for (const std::string& s : stops) {
    if (s.empty()) continue;
    const size_t max_len = std::min(text.size(), s.size() - 1);
    for (size_t len = max_len; len > best; --len)
      if (text.substr(text.size() - len) == std::string_view(s).substr(0, len)) {
        best = len;
        break;
      }
  }
  return best;
}

std::string StopStringMatcher::push(std::string_view text) {
  if (stopped_) return "";
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, {});
  // The earliest stop string wins; `held_` never contains a whole stop string before this append, so a
  // match must end inside the new text.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  const size_t keep = partial_stop_suffix(held_, stops_);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringMatcher::flush() {
  if (stopped_) return "";
  return std::exchange(held_, {});
}

}  // namespace kvik::server
