// Runs the kvik binary under test (KVIK_BINARY, set by tests/CMakeLists.txt) as a user would, for CLI tests.
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// Runs kvik with `args` as its own process and returns its exit code (-1 when killed by a signal); its stderr goes
// into *err and its peak resident memory (KiB, from wait4) into *peak_rss_kib when they are given.
inline int run_measured(const std::string& args, std::string* err = nullptr, long* peak_rss_kib = nullptr) {
  const std::string errfile =
      (std::filesystem::temp_directory_path() / ("kvik_run_err_" + std::to_string(::getpid()))).string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string cmd = std::string(KVIK_BINARY) + " " + args + " 2>" + errfile;
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage ru {};
  ::wait4(pid, &status, 0, &ru);
  if (peak_rss_kib) *peak_rss_kib = ru.ru_maxrss;
  if (err) {
    std::ifstream in(errfile);
    err->assign(std::istreambuf_iterator<char>(in), {});
  }
  std::filesystem::remove(errfile);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace kvik::test
