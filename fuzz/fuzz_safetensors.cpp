// libFuzzer entry point for the safetensors reader: any byte string either parses or throws kvik::Error, and every
// tensor it accepts lies inside the input (its first and last data bytes are read, so ASan checks the bounds).
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "formats/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto st = kvik::SafetensorsFile::parse({data, size}, "fuzz-input");
    for (const auto& [name, t] : st->tensors()) {
      (void)t.numel();
      if (t.nbytes > 0) {
        volatile uint8_t edge = t.data[0] ^ t.data[t.nbytes - 1];
        (void)edge;
      }
    }
  } catch (const kvik::Error&) {
  }
  return 0;
}
