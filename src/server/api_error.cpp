#include "server/api_error.h"

namespace tern::server {

ApiError::ApiError(int status, std::string message, std::optional<std::string> param, std::optional<std::string> code)
    : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)), code_(std::move(code)) {}

std::string ApiError::type() const { return status_ >= 500 ? "server_error" : "invalid_request_error"; }

nlohmann::json ApiError::to_json() const {
  nlohmann::json error = {{"message", what()}, {"type", type()}, {"param", nullptr}, {"code", nullptr}};
  if (param_) error["param"] = *param_;
  if (code_) error["code"] = *code_;
  return {{"error", std::move(error)}};
}

}  // namespace tern::server
