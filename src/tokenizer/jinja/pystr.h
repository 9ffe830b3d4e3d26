#pragma once
// Python `str` semantics over UTF-8 byte strings, for the Jinja interpreter: code-point length and
// slicing, whitespace and case rules (str.isspace, upper, lower, title, capitalize), strip/split,
// repr() of strings and floats. Source: CPython 3.11 Objects/unicodeobject.c and Python/pystrtod.c
// (float repr "short" style); character properties come from utf8proc.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ft::jinja::py {

/** Most bytes one string operation (padding, replace, indent, repetition) may build: a template
 *  asking for more (a width of 10**9) gets an OverflowError instead of exhausting memory, as Python's
 *  MemoryError would stop it. */
inline constexpr size_t kMaxStrBytes = size_t{64} << 20;
/** Raises OverflowError when a string of `bytes` would exceed kMaxStrBytes. */
void check_str_bytes(size_t bytes);

/** Decodes the code point at s[i] and advances i. Invalid bytes decode as themselves (one byte). */
char32_t next_cp(std::string_view s, size_t& i);

/** Appends the UTF-8 encoding of cp. */
void append_cp(std::string& out, char32_t cp);

/** Number of code points (Python len(str)). */
size_t length(std::string_view s);

/** Code points of s. */
std::vector<char32_t> code_points(std::string_view s);

/** True for characters Python's str.isspace() accepts. */
bool is_space(char32_t cp);

/** str.upper() / str.lower() / str.title() / str.capitalize() / str.swapcase() (simple case mappings). */
std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);
std::string capitalize(std::string_view s);
std::string swapcase(std::string_view s);

/** str.isupper(), islower(), isalpha(), isdigit(), isalnum(), isspace(), istitle() semantics. */
bool is_upper(std::string_view s);
bool is_lower(std::string_view s);
bool is_alpha(std::string_view s);
bool is_digit(std::string_view s);
bool is_alnum(std::string_view s);
bool is_all_space(std::string_view s);
/** True when cp is a letter or digit or '_' (the regex class \w). */
bool is_word_char(char32_t cp);

/** str.strip(chars) / lstrip / rstrip; chars = nullopt strips whitespace. */
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);

/** str.split(sep, maxsplit) and str.rsplit; sep = nullopt splits on whitespace runs. Empty sep throws. */
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);

/** str.splitlines(keepends). */
std::vector<std::string> splitlines(std::string_view s, bool keepends);

/** str.replace(old, new, count); count < 0 replaces all. */
std::string replace(std::string_view s, std::string_view old_s, std::string_view new_s, int64_t count);

/** Code-point index of the first (last) occurrence of sub in s[start:end], or -1 (str.find / rfind). */
int64_t find(std::string_view s, std::string_view sub, bool reverse);

/** str.count(sub) (non-overlapping). */
int64_t count(std::string_view s, std::string_view sub);

/** s[start:stop:step] with Python slice semantics on code points (nullopt = omitted). */
std::string slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop,
                  std::optional<int64_t> step);

/** str.center / ljust / rjust with a one-code-point fill. */
std::string pad(std::string_view s, int64_t width, char32_t fill, int where /* -1 left, 0 center, 1 right */);

/** repr() of a str, as Python prints it inside lists ('abc', "it's", '\n' escapes). */
std::string repr(std::string_view s);

/** repr() of a float ("1.0", "1e+16", "0.0001", "1e-05", "inf", "nan"). */
std::string float_repr(double v);

/** Resolves Python slice bounds for a sequence of length n; returns the selected indices. */
std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step);

}  // namespace ft::jinja::py
