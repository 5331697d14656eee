#pragma once
// Helpers shared by the latentserve subcommands.
#include <cstdint>
#include <string>
#include <vector>

namespace latentserve::cli {

// "1,17,250" -> {1, 17, 250}; an entry that is not an integer is an Error naming it.
std::vector<int32_t> parse_token_list(const std::string& text, const std::string& flag);

// Shortest text that reads back as the same f32.
std::string format_float(float value);

}  // namespace latentserve::cli
