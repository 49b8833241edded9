#pragma once
// A replica's base URL, as given on the command line or to /admin/replicas: http://host:port (no path, no TLS).
// Parsing is strict because the URL decides where clients' requests, their API keys included, are sent: no
// credentials, no path, query or fragment, and a host that every resolver reads the same way.
#include <string>
#include <string_view>

namespace tern::gateway {

struct ReplicaAddress {
  std::string url;   // normalized: "http://host:port", no trailing slash ("http://[::1]:8000" for IPv6)
  std::string host;  // an IPv4 address in dotted form, an IPv6 address without brackets, or a host name
  std::string port;

  // "host:port" as the Host header carries it (IPv6 in brackets).
  std::string_view authority() const { return std::string_view(url).substr(std::string_view("http://").size()); }
};

// Accepts "http://host:port", "http://host:port/" and "host:port", where host is a dotted IPv4 address, an IPv6
// address in brackets or a DNS name (letters, digits, '-' and '.'). Throws tern::Error naming the URL and what is
// wrong otherwise: another scheme, user@ credentials, a path, query or fragment, a zone index, an IPv4 address in
// a form other than a.b.c.d (such as 0x7f000001 or 127.1, which resolvers take for 127.0.0.1), a bad port.
ReplicaAddress parse_replica_url(std::string_view url);

// Whether `host` is a DNS name as parse_replica_url accepts one: dot-separated labels of letters, digits and inner
// hyphens, the last not all digits.
bool is_host_name(std::string_view host);

}  // namespace tern::gateway
