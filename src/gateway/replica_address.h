#pragma once
// A replica's base URL, as given on the command line or to /admin/replicas: http://host:port (no path, no TLS).
#include <string>
#include <string_view>

namespace tern::gateway {

struct ReplicaAddress {
  std::string url;   // normalized: "http://host:port", no trailing slash
  std::string host;
  std::string port;
};

// Accepts "http://host:port", "http://host:port/" and "host:port"; throws tern::Error naming the URL otherwise.
ReplicaAddress parse_replica_url(std::string_view url);

}  // namespace tern::gateway
