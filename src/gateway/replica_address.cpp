#include "gateway/replica_address.h"

#include <algorithm>

#include "core/error.h"

namespace tern::gateway {

ReplicaAddress parse_replica_url(std::string_view url) {
  std::string_view rest = url;
  if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else if (rest.find("://") != std::string_view::npos) {
    fail("replica URL '{}': only http:// is supported", url);
  }
  while (rest.ends_with('/')) rest.remove_suffix(1);
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || rest.find('/') != std::string_view::npos) {
    fail("replica URL '{}': expected http://host:port", url);
  }
  const std::string_view host = rest.substr(0, colon);
  const std::string_view port = rest.substr(colon + 1);
  const bool port_is_number = !port.empty() && port.size() <= 5 &&
                              std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!port_is_number || std::stoi(std::string(port)) == 0 || std::stoi(std::string(port)) > 65535) {
    fail("replica URL '{}': port '{}' is not a number from 1 to 65535", url, port);
  }
  return {fmt::format("http://{}:{}", host, port), std::string(host), std::string(port)};
}

}  // namespace tern::gateway
