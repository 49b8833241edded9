#pragma once
// Errors inside tern are exceptions of one type that carry a message naming what was wrong and where.
// They are caught at the edges (CLI, server request handlers, engine loop) and never cross a thread.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tern {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tern
