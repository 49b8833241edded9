#pragma once
// Checks a request head before its body is read, for what HTTP/1.1 (RFC 9112) requires a server to refuse:
// framing that a proxy in front of us could read differently (section 6: only the chunked transfer coding, never
// together with Content-Length, and one Content-Length value), and a missing or repeated Host (section 3.2).
// After a framing error nobody knows where the next request on the connection starts, so these are answered 400
// and the connection is closed; reading on would serve bytes a proxy sent as a body as a request of their own
// (request smuggling).
#include <boost/beast/http/message.hpp>
#include <optional>
#include <string>

namespace tern::server {

// What is wrong with `head` (nullopt: nothing), in words for the client.
std::optional<std::string> request_head_error(const boost::beast::http::request_header<>& head);

}  // namespace tern::server
