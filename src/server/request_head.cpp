#include "server/request_head.h"

#include <fmt/format.h>

#include <boost/beast/core/string.hpp>

namespace tern::server {

namespace http = boost::beast::http;

namespace {

// Every line of the field, joined as one list (RFC 9110 section 5.3).
std::string joined_values(const http::request_header<>& head, http::field field) {
  std::string joined;
  const auto [begin, end] = head.equal_range(field);
  for (auto it = begin; it != end; ++it) {
    if (!joined.empty()) joined += ", ";
    joined += std::string(it->value());
  }
  return joined;
}

}  // namespace

std::optional<std::string> request_head_error(const http::request_header<>& head) {
  const size_t num_hosts = head.count(http::field::host);
  if (num_hosts > 1) return "the request has more than one Host header (RFC 9112 section 3.2)";
  if (num_hosts == 0 && head.version() >= 11) return "the HTTP/1.1 request has no Host header (RFC 9112 section 3.2)";

  const size_t num_lengths = head.count(http::field::content_length);
  const std::string lengths = joined_values(head, http::field::content_length);
  if (num_lengths > 1 || lengths.find(',') != std::string::npos) {
    return fmt::format("the request has more than one Content-Length ({}); it must have one (RFC 9112 section 6.3)",
                       lengths);
  }
  if (head.count(http::field::transfer_encoding) == 0) return std::nullopt;
  if (num_lengths > 0) {
    return "the request has both Transfer-Encoding and Content-Length; it must have one (RFC 9112 section 6.1)";
  }
  const std::string codings = joined_values(head, http::field::transfer_encoding);
  if (head.version() < 11) return "an HTTP/1.0 request cannot have a Transfer-Encoding (RFC 9112 section 6.1)";
  if (!boost::beast::iequals(codings, "chunked")) {
    return fmt::format("the Transfer-Encoding '{}' is not supported; the only one accepted is 'chunked' (RFC 9112 "
                       "section 6.1)",
                       codings);
  }
  return std::nullopt;
}

}  // namespace tern::server
