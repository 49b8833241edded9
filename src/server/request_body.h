#pragma once
// Reads an HTTP request body as JSON, refusing what would be expensive or dangerous to process further:
// malformed JSON or invalid UTF-8 (400) and nesting deeper than kMaxJsonNesting (400), checked before parsing.
#include <string_view>

#include "core/nesting_limit.h"  // json_nesting_depth
#include "server/request_fields.h"

namespace tern::server {

inline constexpr int kMaxJsonNesting = 64;

// Throws a 400 ApiError for an empty body, too deep nesting or malformed JSON (with the parser's position).
Json parse_request_body(std::string_view body);

}  // namespace tern::server
