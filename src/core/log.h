// Start-up and status lines on stderr: "INFO 12:03:04 message".
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <ctime>

namespace kvik {

template <typename... Args>
void log_line(const char* level, fmt::format_string<Args...> f, Args&&... args) {
  std::time_t now = std::time(nullptr);
  char ts[16];
  std::strftime(ts, sizeof ts, "%H:%M:%S", std::localtime(&now));
  std::string line = fmt::format("{} {} {}\n", level, ts, fmt::format(f, std::forward<Args>(args)...));
  std::fwrite(line.data(), 1, line.size(), stderr);
}
template <typename... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  log_line("INFO", f, std::forward<Args>(args)...);
}
template <typename... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  log_line("WARN", f, std::forward<Args>(args)...);
}

}  // namespace kvik
