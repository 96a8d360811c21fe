// One error type for loading and parsing: it carries the context a user needs to fix the problem
// (file, key or tensor, byte offset, expected vs found). Request validation uses values, not this.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace kvik {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kvik
