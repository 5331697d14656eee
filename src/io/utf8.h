#pragma once
// Strict UTF-8 validation (RFC 3629): no overlong forms, no UTF-16 surrogates
// (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequences.
#include <cstddef>
#include <optional>
#include <string_view>

namespace latentserve {

// Offset of the first byte that does not start or continue a valid sequence;
// nullopt when the whole text is valid.
std::optional<size_t> find_invalid_utf8(std::string_view text);

}  // namespace latentserve
