#pragma once
// The chat page's files (web/ at the repository root), built into the binary: cmake/embed_web.cmake
// writes their bytes and MIME types into a generated .cpp at build time.
#include <span>
#include <string_view>

namespace ft::server {

/** One file of web/: its URL path ("/app.js"), Content-Type and bytes (static storage). */
struct WebAsset {
  std::string_view path;
  std::string_view content_type;
  std::string_view body;
};

/** Every file of web/, sorted by path. */
std::span<const WebAsset> web_assets();

/** The file served at URL `path`: "/" is "/index.html"; nullptr when web/ has none of that name. */
inline const WebAsset* find_web_asset(std::string_view path) {
  if (path == "/") path = "/index.html";
  for (const WebAsset& a : web_assets())
    if (a.path == path) return &a;
  return nullptr;
}

}  // namespace ft::server
