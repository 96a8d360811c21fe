// libFuzzer entry point for the GGUF reader: any byte string either parses or throws kvik::Error.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "formats/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto g = kvik::GgufFile::parse({data, size}, "fuzz-input");
    for (const auto& t : g->tensors()) (void)t.numel();
  } catch (const kvik::Error&) {
  }
  return 0;
}
