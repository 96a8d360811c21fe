// Runs the kvik binary under test (KVIK_BINARY, set by tests/CMakeLists.txt) as a user would, for CLI tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace kvik::test {

struct Result {
  int code;
  std::string out;
};

// Runs kvik with `args`; stderr goes into the output too unless only stdout is wanted.
inline Result run(const std::string& args, bool with_stderr = true) {
  const std::string cmd = std::string(KVIK_BINARY) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace kvik::test
