#pragma once
// UTF-8 helpers for the tokenizer: decoding code points, lossy repair of invalid input,
// Unicode properties and normalization through utf8proc (no hand-written tables).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace latentserve::tokenizer {

// Length in bytes of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid
// (overlong, surrogate, > U+10FFFF, truncated).
size_t utf8_valid_length(std::string_view s, size_t i);

// Decodes the code point at s[i] (which must be valid UTF-8) and advances i.
char32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, char32_t cp);
bool is_valid_utf8(std::string_view s);

// Invalid UTF-8 becomes U+FFFD, one per maximal invalid subpart (the rule of Rust's
// String::from_utf8_lossy, Python's errors="replace" and the WHATWG decoder).
std::string utf8_lossy(std::string_view s);

// Rust char::is_whitespace (White_Space property), char::is_alphanumeric, char::is_numeric.
bool is_whitespace(char32_t cp);
bool is_alphanumeric(char32_t cp);
bool is_numeric(char32_t cp);
bool is_combining_mark(char32_t cp);  // general category Mn

enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string normalize_unicode(std::string_view s, NormalForm form);
std::string to_lowercase(std::string_view s);

// GPT-2 byte-level alphabet: every byte maps to one printable code point.
const std::array<char32_t, 256>& byte_to_unicode();
// Code point -> byte, or -1 when the code point is not in the alphabet.
int unicode_to_byte(char32_t cp);

}  // namespace latentserve::tokenizer
