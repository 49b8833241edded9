#include "server/sse.h"

namespace tern::server {

// JSON text never holds a raw newline (dump escapes them), so one event is always one data line.
std::string sse_event(const Json& data) {
  return "data: " + data.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace tern::server
