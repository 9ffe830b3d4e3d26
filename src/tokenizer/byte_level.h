#pragma once
// GPT-2 byte-level alphabet: every byte maps to one printable code point so BPE can work on text.
// Bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF map to themselves; the other 68 bytes map, in byte
// order, to U+0100, U+0101, ... (bytes_to_unicode() in openai/gpt-2 src/encoder.py).
#include <cstdint>
#include <string>
#include <string_view>

namespace ft {

/** Code point standing for byte `b`. */
uint32_t byte_to_unicode(uint8_t b);

/** The byte a code point stands for, or -1 when `cp` is not in the alphabet. */
int unicode_to_byte(uint32_t cp);

/** Maps raw bytes to their byte-level string (UTF-8 of the mapped code points). */
std::string byte_level_encode(std::string_view bytes);

/** Maps a byte-level token text back to raw bytes. Characters outside the alphabet are copied as
 *  their UTF-8 bytes; invalid UTF-8 is copied byte by byte. */
std::string byte_level_decode(std::string_view text);

}  // namespace ft
