#pragma once
// SHA-256 (FIPS 180-4) and base64 (RFC 4648, standard alphabet, padded): what the Anthropic route's
// thinking-block signatures are made of (anthropic_messages.cpp). Not used for any security decision.
#include <string>
#include <string_view>

namespace ft::server {

/** The 32-byte SHA-256 digest of `data`, as raw bytes. */
std::string sha256(std::string_view data);

/** `bytes` in base64 (RFC 4648 section 4: A-Z a-z 0-9 + /, '=' padding). */
std::string base64(std::string_view bytes);

}  // namespace ft::server
