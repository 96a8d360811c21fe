// The web pages `kvik serve` serves (src/server/web/: chat at /, the engine dashboard at /dashboard, the step trace
// at /trace), compiled into the binary by cmake/embed_files.cmake: nothing is read from disk or fetched at run time.
#pragma once

#include <span>
#include <string_view>

namespace kvik::server {

struct WebAsset {
  std::string_view path;  // "/index.html", "/app.js", ...: the file's path under src/server/web/
  std::string_view body;
};

std::span<const WebAsset> web_assets();

// The asset a GET of `path` serves ("/" → index.html, "/dashboard" → dashboard.html, "/web/x" → x), or null;
// `content_type` is set from its extension.
const WebAsset* find_web_asset(std::string_view path, std::string& content_type);

}  // namespace kvik::server
