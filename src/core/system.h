// Facts about the machine the process runs on.
#pragma once

#include <unistd.h>

#include <cstdint>

namespace kvik {

// Total physical memory in bytes (8 GiB when the system does not say).
inline int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : (int64_t{8} << 30);
}

}  // namespace kvik
