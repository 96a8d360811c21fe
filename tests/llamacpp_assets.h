// The test assets extracted from the pinned llama.cpp source (tests/llamacpp_assets/README.md): real vocabularies
// (models/ggml-vocab-*.gguf, with llama.cpp's tokenizer cases *.gguf.inp / *.gguf.out) and chat templates
// (models/templates/*.jinja), in KVIK_LLAMACPP_ASSETS (set by tests/CMakeLists.txt).
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

namespace kvik::test {

// The path of `relative` (e.g. "models/ggml-vocab-qwen2.gguf") among the assets. A missing asset is an error, not
// a skip: the test fails, naming the file and the command that extracts it.
inline std::string llamacpp_asset(const std::string& relative) {
  const std::filesystem::path p = std::filesystem::path(KVIK_LLAMACPP_ASSETS) / relative;
  if (!std::filesystem::exists(p))
    throw std::runtime_error("missing llama.cpp test asset " + p.string() +
                             ": run scripts/test.sh, or tests/llamacpp_assets/extract.sh " KVIK_LLAMACPP_ASSETS);
  return p.string();
}

}  // namespace kvik::test
