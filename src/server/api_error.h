#pragma once
// An error a request handler reports to the client in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}} with an HTTP status.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

namespace tern::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::optional<std::string> param = std::nullopt,
           std::optional<std::string> code = std::nullopt);

  int status() const { return status_; }
  const std::optional<std::string>& param() const { return param_; }
  const std::optional<std::string>& code() const { return code_; }
  // "invalid_request_error" for 4xx, "server_error" for 5xx, as OpenAI names them.
  std::string type() const;
  nlohmann::json to_json() const;

 private:
  int status_;
  std::optional<std::string> param_;
  std::optional<std::string> code_;
};

// A 400 about one request field; `param` names it as the client spelled it (e.g. "messages[2].content").
template <typename... Args>
[[noreturn]] void fail_param(const std::string& param, fmt::format_string<Args...> format, Args&&... args) {
  throw ApiError(400, fmt::format(format, std::forward<Args>(args)...), param);
}

}  // namespace tern::server
