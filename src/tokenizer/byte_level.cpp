#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace ft {
namespace {

struct ByteTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 512> from_cp{};  // every mapped code point is < 0x144
  ByteTables() {
    from_cp.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables t;
  return t;
}

}  // namespace

uint32_t byte_to_unicode(uint8_t b) { return tables().to_cp[b]; }

int unicode_to_byte(uint32_t cp) { return cp < 512 ? tables().from_cp[cp] : -1; }

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8_append(out, byte_to_unicode(static_cast<uint8_t>(c)));
  return out;
}

std::string byte_level_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    Utf8Char c = utf8_decode(text.substr(i));
    if (c.status != Utf8Char::kValid) {
      out += text[i++];
      continue;
    }
    const int b = unicode_to_byte(c.cp);
    if (b >= 0) out += static_cast<char>(b);
    else out.append(text.substr(i, c.len));
    i += c.len;
  }
  return out;
}

}  // namespace ft
