// The model `kvik serve` runs when none is named: the repository's models/stories260K.gguf (models/README.md).
#pragma once

#include <string>
#include <vector>

namespace kvik::cli {

// Where the bundled model may be, in the order they are tried: the source tree the binary was built from
// (KVIK_MODELS_DIR, set by CMake), then beside the executable as installed (<prefix>/bin/kvik →
// <prefix>/share/kvik/models/) and as built (<repo>/build/kvik → <repo>/models/).
std::vector<std::string> default_model_candidates();

// The first candidate that exists; throws kvik::Error listing every path tried and naming the way to pass a
// model (`kvik serve MODEL.gguf` or --model) when none does.
std::string default_model_path();

}  // namespace kvik::cli
