#include "server/web_assets.h"

#include <string>

namespace kvik::server {

namespace {

std::string_view content_type_of(std::string_view path) {
  auto ends = [&](std::string_view ext) {
    return path.size() >= ext.size() && path.substr(path.size() - ext.size()) == ext;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

}  // namespace

const WebAsset* find_web_asset(std::string_view path, std::string& content_type) {
  std::string file;
  if (path == "/" || path == "/index.html")
    file = "/index.html";
  else if (path == "/dashboard" || path == "/trace")
    file = std::string(path) + ".html";
  else if (path.rfind("/web/", 0) == 0)
    file = std::string(path.substr(4));
  else
    return nullptr;
  for (const WebAsset& a : web_assets())
    if (a.path == file) {
      content_type = content_type_of(a.path);
      return &a;
    }
  return nullptr;
}

}  // namespace kvik::server
