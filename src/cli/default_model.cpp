#include "cli/default_model.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"

#ifndef KVIK_MODELS_DIR
#define KVIK_MODELS_DIR ""
#endif

namespace kvik::cli {

namespace {

constexpr const char* kBundledModel = "stories260K.gguf";

}  // namespace

std::vector<std::string> default_model_candidates() {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  if (*KVIK_MODELS_DIR) out.push_back((fs::path(KVIK_MODELS_DIR) / kBundledModel).string());
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path up = exe.parent_path().parent_path();
    for (const fs::path& p : {up / "share/kvik/models" / kBundledModel, up / "models" / kBundledModel})
      if (std::find(out.begin(), out.end(), p.string()) == out.end()) out.push_back(p.string());
  }
  return out;
}

std::string default_model_path() {
  const std::vector<std::string> candidates = default_model_candidates();
  std::string tried;
  for (const auto& c : candidates) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(c, ec)) return c;
    tried += (tried.empty() ? "" : ", ") + c;
  }
  fail(
      "no model given, and the bundled {} is not where kvik looks for it ({}): name a GGUF model file or Hugging "
      "Face directory, as `kvik serve MODEL` or `kvik serve --model MODEL`",
      kBundledModel, tried.empty() ? "no path: /proc/self/exe unreadable and no source tree compiled in" : tried);
}

}  // namespace kvik::cli
