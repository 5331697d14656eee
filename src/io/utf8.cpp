#include "io/utf8.h"

#include <cstdint>

namespace latentserve {

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t lead = uint8_t(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    // Sequence length and the allowed range of the second byte (Unicode Table 3-7):
    // narrowing the second byte's range is what excludes overlongs, surrogates and
    // code points above U+10FFFF.
    size_t length;
    uint8_t second_lo = 0x80, second_hi = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      if (lead == 0xe0) second_lo = 0xa0;  // overlong below U+0800
      if (lead == 0xed) second_hi = 0x9f;  // surrogates U+D800..U+DFFF
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      if (lead == 0xf0) second_lo = 0x90;  // overlong below U+10000
      if (lead == 0xf4) second_hi = 0x8f;  // above U+10FFFF
    } else {
      return i;  // 0x80..0xc1 (continuation or overlong lead) or 0xf5..0xff
    }
    if (i + length > n) return i;
    const uint8_t second = uint8_t(text[i + 1]);
    if (second < second_lo || second > second_hi) return i;
    for (size_t k = 2; k < length; ++k) {
      const uint8_t c = uint8_t(text[i + k]);
      if (c < 0x80 || c > 0xbf) return i;
    }
    i += length;
  }
  return std::nullopt;
}

}  // namespace latentserve
