#include "gateway/replica_admission.h"

#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace tern::gateway {

namespace ip = boost::asio::ip;

namespace {

// An IPv4-mapped IPv6 address (::ffff:a.b.c.d) as the IPv4 address it reaches.
ip::address unmapped(const ip::address& address) {
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return ip::make_address_v4(ip::v4_mapped, address.to_v6());
  }
  return address;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
  return out;
}

bool is_localhost_name(std::string_view host) { return host == "localhost" || host.ends_with(".localhost"); }

// Whether `address` is one of this machine's interface addresses (what a listener on 0.0.0.0 or :: accepts on).
bool is_local_interface_address(const ip::address& address) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  const std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owned(list, freeifaddrs);
  for (const ifaddrs* entry = list; entry; entry = entry->ifa_next) {
    if (!entry->ifa_addr) continue;
    if (entry->ifa_addr->sa_family == AF_INET && address.is_v4()) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
      ip::address_v4::bytes_type bytes;
      std::memcpy(bytes.data(), &in->sin_addr, bytes.size());
      if (ip::address_v4(bytes) == address.to_v4()) return true;
    } else if (entry->ifa_addr->sa_family == AF_INET6 && address.is_v6()) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(entry->ifa_addr);
      ip::address_v6::bytes_type bytes;
      std::memcpy(bytes.data(), &in6->sin6_addr, bytes.size());
      if (ip::address_v6(bytes) == address.to_v6()) return true;
    }
  }
  return false;
}

}  // namespace

bool is_forbidden_destination(const ip::address& address) {
  const ip::address target = unmapped(address);
  if (target.is_v4()) {
    const ip::address_v4::bytes_type bytes = target.to_v4().to_bytes();
    return bytes[0] == 0 || (bytes[0] == 169 && bytes[1] == 254);
  }
  return target.to_v6().is_link_local() || target.to_v6().is_unspecified();
}

ReplicaAdmission::ReplicaAdmission(const std::vector<std::string>& allowed_hosts) {
  for (const std::string& entry : allowed_hosts) {
    const size_t slash = entry.find('/');
    const std::string address_text = entry.substr(0, slash);
    boost::system::error_code ec;
    const ip::address address = ip::make_address(address_text, ec);
    if (ec) {
      if (slash != std::string::npos || !is_host_name(entry)) {
        fail("--allowed-replica-hosts: '{}' is neither an IP address, a CIDR range (10.0.0.0/8) nor a host name",
             entry);
      }
      allowed_names_.push_back(lowercase(entry));
      continue;
    }
    Range range;
    range.is_v4 = address.is_v4();
    const int max_prefix_len = range.is_v4 ? 32 : 128;
    range.prefix_len = max_prefix_len;
    if (slash != std::string::npos) {
      const std::string prefix = entry.substr(slash + 1);
      const bool is_number = !prefix.empty() && prefix.size() <= 3 &&
                             std::all_of(prefix.begin(), prefix.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!is_number || std::stoi(prefix) > max_prefix_len) {
        fail("--allowed-replica-hosts: '{}' has a prefix length that is not a number from 0 to {}", entry,
             max_prefix_len);
      }
      range.prefix_len = std::stoi(prefix);
    }
    if (range.is_v4) {
      const auto bytes = address.to_v4().to_bytes();
      std::copy(bytes.begin(), bytes.end(), range.bytes.begin());
    } else {
      range.bytes = address.to_v6().to_bytes();
    }
    allowed_ranges_.push_back(range);
  }
}

void ReplicaAdmission::set_listen_address(const ip::address& address, uint16_t port) {
  listen_ip_ = unmapped(address);
  listen_port_ = port;
}

void ReplicaAdmission::check(const ReplicaAddress& address, ReplicaOrigin origin) const {
  boost::system::error_code ec;
  const ip::address literal = ip::make_address(address.host, ec);
  if (!ec && is_forbidden_destination(literal)) {
    fail("replica URL '{}': {} is a link-local or unspecified address; the gateway never sends requests there",
         address.url, address.host);
  }
  if (reaches_gateway(address)) {
    fail("replica URL '{}' is the gateway's own address: it would forward every request to itself", address.url);
  }
  if (origin == ReplicaOrigin::kAdminApi && !allowed(address)) {
    fail("replica URL '{}': {} is not in --allowed-replica-hosts", address.url, address.host);
  }
}

bool ReplicaAdmission::allowed(const ReplicaAddress& address) const {
  if (allowed_ranges_.empty() && allowed_names_.empty()) return true;
  boost::system::error_code ec;
  const ip::address literal = ip::make_address(address.host, ec);
  if (ec) return std::find(allowed_names_.begin(), allowed_names_.end(), address.host) != allowed_names_.end();
  const ip::address target = unmapped(literal);
  std::array<uint8_t, 16> bytes{};
  if (target.is_v4()) {
    const auto v4 = target.to_v4().to_bytes();
    std::copy(v4.begin(), v4.end(), bytes.begin());
  } else {
    bytes = target.to_v6().to_bytes();
  }
  return std::any_of(allowed_ranges_.begin(), allowed_ranges_.end(), [&](const Range& range) {
    if (range.is_v4 != target.is_v4()) return false;
    for (int bit = 0; bit < range.prefix_len; ++bit) {
      const uint8_t mask = static_cast<uint8_t>(0x80u >> (bit % 8));
      if ((bytes[bit / 8] & mask) != (range.bytes[bit / 8] & mask)) return false;
    }
    return true;
  });
}

bool ReplicaAdmission::reaches_gateway(const ReplicaAddress& address) const {
  if (!listen_ip_ || std::to_string(listen_port_) != address.port) return false;
  std::vector<ip::address> targets;
  boost::system::error_code ec;
  const ip::address literal = ip::make_address(address.host, ec);
  if (!ec) {
    targets.push_back(unmapped(literal));
  } else if (is_localhost_name(address.host)) {
    targets = {ip::address_v4::loopback(), ip::address_v6::loopback()};
  }
  return std::any_of(targets.begin(), targets.end(), [&](const ip::address& target) {
    if (target == *listen_ip_) return true;
    if (!listen_ip_->is_unspecified()) return false;
    return target.is_loopback() || is_local_interface_address(target);
  });
}

}  // namespace tern::gateway
