#pragma once
// Server-sent events as OpenAI streams them: one "data: <json>" event per chunk, then "data: [DONE]".
#include <string>

#include "server/request_fields.h"

namespace tern::server {

std::string sse_event(const Json& data);
std::string sse_done();

}  // namespace tern::server
