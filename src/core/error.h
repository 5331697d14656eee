#pragma once
// latentserve::Error: thrown at API and I/O boundaries. The message says what was
// expected and what was found, and names the file / tensor / field involved.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace latentserve {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// fail("{}: tensor '{}' has shape {}, expected {}", file, name, ...) throws Error.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// Re-throws an Error with `context` prepended ("loading model.safetensors: ...").
template <typename Fn>
auto with_context(const std::string& context, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(context + ": " + e.what());
  }
}

}  // namespace latentserve
