#include "server/request_body.h"

#include <fmt/format.h>

#include "core/ordered_json_parser.h"
#include "server/api_error.h"

namespace tern::server {

Json parse_request_body(std::string_view body) {
  if (body.empty()) throw ApiError(400, "the request body is empty; expected a JSON object");
  if (json_nesting_depth(body, kMaxJsonNesting) > kMaxJsonNesting) {
    throw ApiError(400, fmt::format("the request body nests arrays and objects deeper than {} levels", kMaxJsonNesting));
  }
  try {
    return parse_ordered_json(body);
  } catch (const Json::parse_error& e) {
    throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()));
  } catch (const Json::out_of_range& e) {  // e.g. a number such as 1e400 that no double holds
    throw ApiError(400, fmt::format("the request body holds a number out of range: {}", e.what()));
  }
}

}  // namespace tern::server
