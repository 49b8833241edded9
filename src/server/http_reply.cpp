#include "server/http_reply.h"

namespace tern::server {

HttpReply HttpReply::json(const nlohmann::ordered_json& body, int status) {
  return {status, "application/json", body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)};
}

HttpReply HttpReply::error(const ApiError& error) {
  return {error.status(), "application/json", error.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
}

}  // namespace tern::server
