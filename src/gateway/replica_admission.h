#pragma once
// Which addresses the gateway may send clients' requests (and their Authorization headers) to. Rules, each
// refusal naming the URL and the rule:
// - never a link-local address (169.254.0.0/16, fe80::/10: cloud metadata services live there) or an unspecified
//   one (0.0.0.0/8, ::, which reach the local host), also not as IPv4-mapped IPv6; host names are checked when
//   they resolve, before every connection (is_forbidden_destination);
// - never the gateway itself (its listen port on its listen address, on a loopback address or "localhost", or on
//   any local interface's address when it listens on all of them): it would forward each request to itself;
// - replicas added through /admin/replicas must match --allowed-replica-hosts when it is given: an IP address or
//   CIDR range matches a replica given by IP address, a host name matches the same name (names are not resolved
//   for this). Replicas given on the command line are trusted.
#include <array>
#include <boost/asio/ip/address.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/replica_address.h"

namespace tern::gateway {

enum class ReplicaOrigin { kCommandLine, kAdminApi };

// Link-local or unspecified, directly or as an IPv4-mapped IPv6 address.
bool is_forbidden_destination(const boost::asio::ip::address& ip);

class ReplicaAdmission {
 public:
  // `allowed_hosts`: --allowed-replica-hosts entries (IP addresses, CIDR ranges, host names); empty: any host.
  // Throws tern::Error naming an entry that is none of these.
  explicit ReplicaAdmission(const std::vector<std::string>& allowed_hosts);

  // Where the gateway accepts connections; until set, no address counts as the gateway's own.
  void set_listen_address(const boost::asio::ip::address& ip, uint16_t port);

  // Throws tern::Error naming the URL and the rule it breaks.
  void check(const ReplicaAddress& address, ReplicaOrigin origin) const;

 private:
  struct Range {
    std::array<uint8_t, 16> bytes{};  // IPv4 in the first 4
    bool is_v4 = false;
    int prefix_len = 0;
  };
  bool allowed(const ReplicaAddress& address) const;
  bool reaches_gateway(const ReplicaAddress& address) const;

  std::vector<Range> allowed_ranges_;
  std::vector<std::string> allowed_names_;  // lowercase
  std::optional<boost::asio::ip::address> listen_ip_;
  uint16_t listen_port_ = 0;
};

}  // namespace tern::gateway
