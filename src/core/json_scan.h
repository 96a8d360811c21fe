// Bracket depth of a JSON text read one character at a time, outside strings (escapes understood): the cheap
// structural scan that bounds a request's nesting before parsing and finds where a streamed object ends.
#pragma once

namespace kvik {

struct JsonBracketScan {
  int depth = 0;
  bool in_string = false, escaped = false;

  // Reads c; returns +1 when it opens an object or array, −1 when it closes one, 0 otherwise.
  int step(char c) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      return 0;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
      return 1;
    } else if (c == '}' || c == ']') {
      --depth;
      return -1;
    }
    return 0;
  }
};

}  // namespace kvik
