#include "server/http_types.h"

#include <algorithm>
#include <cctype>

#include "util/format.h"

namespace ft::server {

bool CaseInsensitiveLess::operator()(std::string_view a, std::string_view b) const {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) < std::tolower(static_cast<unsigned char>(y));
  });
}

std::string HttpRequest::get_header_value(std::string_view name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

bool HttpRequest::has_header(std::string_view name) const { return headers.find(name) != headers.end(); }

std::string HttpRequest::get_param_value(std::string_view name) const {
  auto it = params.find(std::string(name));
  return it == params.end() ? std::string() : it->second;
}

bool HttpRequest::is_multipart_form_data() const {
  std::string t = get_header_value("Content-Type");
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t.rfind("multipart/form-data", 0) == 0;
}

std::string HttpResponse::get_header_value(std::string_view name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

void HttpResponse::set_content(std::string b, std::string content_type) {
  body = std::move(b);
  headers.erase("Content-Type");
  headers.emplace("Content-Type", std::move(content_type));
}

void HttpResponse::set_stream(std::string content_type, StreamProvider p, StreamClosed closed) {
  headers.erase("Content-Type");
  headers.emplace("Content-Type", std::move(content_type));
  provider = std::move(p);
  on_closed = std::move(closed);
}


std::string percent_decode(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2])));
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

namespace {

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

}  // namespace

void split_target(HttpRequest& req) {
  std::string_view t = req.target;
  // The absolute form (RFC 9112 section 3.2.2, "http://host:port/path?query"), which a server must
  // accept: its path and query are those the origin form would have sent.
  std::string origin;
  if (starts_with_nocase(t, "http://") || starts_with_nocase(t, "https://")) {
    const size_t at = t.find_first_of("/?", t.find("//") + 2);
    origin = at == std::string_view::npos ? "/" : t[at] == '?' ? "/" + std::string(t.substr(at)) : std::string(t.substr(at));
    t = origin;
  }
  const size_t q = t.find('?');
  req.path = percent_decode(t.substr(0, q), false);
  req.params.clear();
  if (q == std::string_view::npos) return;
  std::string_view rest = t.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    if (!pair.empty()) {
      const size_t eq = pair.find('=');
      req.params.emplace(percent_decode(pair.substr(0, eq), true),
                         eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true));
    }
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
}

}  // namespace ft::server
