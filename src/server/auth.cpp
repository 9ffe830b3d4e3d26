#include "server/auth.h"

#include <cctype>

namespace ft::server {

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Compare over the expected length whatever the input, folding the length mismatch in.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ static_cast<unsigned char>(b[i]));
  }
  return diff == 0;
}

bool api_key_ok(std::string_view expected, std::string_view authorization, std::string_view x_api_key) {
  if (expected.empty()) return true;
  bool ok = false;
  if (authorization.size() > 7) {
    std::string scheme(authorization.substr(0, 7));
    for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (scheme == "bearer ") {
      std::string_view key = authorization.substr(7);
      while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
      while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
      ok = constant_time_equal(key, expected) || ok;
    }
  }
  if (!x_api_key.empty()) ok = constant_time_equal(x_api_key, expected) || ok;
  return ok;
}

bool is_loopback_host(std::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.substr(0, 4) == "127.";
}

std::string url_host(const std::string& host) {
  return host.find(':') != std::string::npos && host.front() != '[' ? "[" + host + "]" : host;
}

}  // namespace ft::server
