// A read-only memory-mapped file. Weights are read straight from the page cache, never copied at load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kvik {

class MmapFile {
 public:
  explicit MmapFile(const std::string& path);  // throws kvik::Error naming the path
  ~MmapFile();
  MmapFile(const MmapFile&) = delete;
  MmapFile& operator=(const MmapFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // Drops the mapped pages wholly inside [p, p + n) from this process (a later read faults them back in from
  // the page cache): a streaming reader calls it behind itself so its resident memory stays small.
  void release(const uint8_t* p, size_t n) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvik
