// A directory of its own under the system's temporary directory (process id + a counter in the name, so tests
// running in parallel never share one), removed with everything in it when the object goes.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace kvik::test {

class TempDir {
 public:
  TempDir()
      : path_(std::filesystem::temp_directory_path() /
              ("kvik_test_" + std::to_string(::getpid()) + "_" + std::to_string(next_++))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int next_ = 0;
  std::filesystem::path path_;
};

}  // namespace kvik::test
