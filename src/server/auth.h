#pragma once
// API-key checks: `Authorization: Bearer KEY` or `x-api-key: KEY`, compared in constant time.
#include <string>
#include <string_view>

namespace ft::server {

/** True when a == b. Runs in time that depends only on the lengths, not on where they differ. */
bool constant_time_equal(std::string_view a, std::string_view b);

/** True when `expected` is empty (no key configured) or one of the headers carries it.
 *  `authorization`: the Authorization header value ("Bearer KEY", scheme case-insensitive);
 *  `x_api_key`: the x-api-key header value. Both may be empty. */
bool api_key_ok(std::string_view expected, std::string_view authorization, std::string_view x_api_key);

/** True for 127.0.0.0/8, ::1 and "localhost": hosts that only local clients can reach. */
bool is_loopback_host(std::string_view host);

/** `host` as a URL's host part: an IPv6 address (one with a ':') in brackets unless it has them
 *  (RFC 3986, section 3.2.2), anything else as given. */
std::string url_host(const std::string& host);

}  // namespace ft::server
