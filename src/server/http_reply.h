#pragma once
// A complete HTTP response that a handler hands back to the connection.
#include <string>

#include "server/api_error.h"

namespace tern::server {

struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;

  static HttpReply json(const nlohmann::ordered_json& body, int status = 200);
  static HttpReply error(const ApiError& error);
};

}  // namespace tern::server
