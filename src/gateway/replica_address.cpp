#include "gateway/replica_address.h"

#include <arpa/inet.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>

#include "core/error.h"

namespace tern::gateway {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

bool starts_with_ignoring_case(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  return std::equal(prefix.begin(), prefix.end(), text.begin(), [](char p, char t) {
    return p == (is_letter(t) ? static_cast<char>(t | 0x20) : t);
  });
}

bool is_label(std::string_view label) {
  return !label.empty() && label.size() <= 63 && label.front() != '-' && label.back() != '-' &&
         std::all_of(label.begin(), label.end(), [](char c) { return is_letter(c) || is_digit(c) || c == '-'; });
}

}  // namespace

// RFC 1123 labels; no empty label, so no leading or trailing dot. The last label must not be all digits, so that
// no name reads as a number to a resolver.
bool is_host_name(std::string_view host) {
  if (host.size() > 253) return false;
  std::string_view last_label;
  size_t begin = 0;
  for (;;) {
    const size_t dot = host.find('.', begin);
    last_label = host.substr(begin, dot == std::string_view::npos ? std::string_view::npos : dot - begin);
    if (!is_label(last_label)) return false;
    if (dot == std::string_view::npos) break;
    begin = dot + 1;
  }
  return !std::all_of(last_label.begin(), last_label.end(), is_digit);
}

ReplicaAddress parse_replica_url(std::string_view url) {
  std::string_view rest = url;
  if (starts_with_ignoring_case(rest, "http://")) {
    rest.remove_prefix(7);
  } else if (starts_with_ignoring_case(rest, "https://")) {
    fail("replica URL '{}': https is not supported (the gateway speaks plain HTTP to replicas); use http://", url);
  } else if (rest.find("://") != std::string_view::npos) {
    fail("replica URL '{}': only http:// is supported", url);
  }
  if (rest.find('@') != std::string_view::npos) {
    fail("replica URL '{}': user@ credentials are not allowed in a replica URL", url);
  }
  if (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.find_first_of("/?#\\") != std::string_view::npos) {
    fail("replica URL '{}': expected http://host:port, with no path, query or fragment", url);
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0) fail("replica URL '{}': expected http://host:port", url);
  std::string_view host = rest.substr(0, colon);
  const std::string_view port = rest.substr(colon + 1);
  const bool port_is_number =
      !port.empty() && port.size() <= 5 && std::all_of(port.begin(), port.end(), is_digit);
  if (!port_is_number || std::stoi(std::string(port)) == 0 || std::stoi(std::string(port)) > 65535) {
    fail("replica URL '{}': port '{}' is not a number from 1 to 65535", url, port);
  }
  const std::string canonical_port = std::to_string(std::stoi(std::string(port)));

  boost::system::error_code ec;
  if (host.starts_with('[')) {
    if (!host.ends_with(']')) fail("replica URL '{}': an IPv6 address needs its closing ']'", url);
    host = host.substr(1, host.size() - 2);
    if (host.find('%') != std::string_view::npos) {
      fail("replica URL '{}': an IPv6 zone index ('%...') is not allowed", url);
    }
    const auto ip = boost::asio::ip::make_address_v6(std::string(host), ec);
    if (ec) fail("replica URL '{}': '{}' is not an IPv6 address", url, host);
    const std::string text = ip.to_string();
    return {fmt::format("http://[{}]:{}", text, canonical_port), text, canonical_port};
  }
  if (host.find(':') != std::string_view::npos) {
    fail("replica URL '{}': write an IPv6 address in brackets, as http://[::1]:8000", url);
  }
  const auto ipv4 = boost::asio::ip::make_address_v4(std::string(host), ec);
  if (!ec) {
    const std::string text = ipv4.to_string();
    return {fmt::format("http://{}:{}", text, canonical_port), text, canonical_port};
  }
  // inet_aton reads what getaddrinfo would connect to: hexadecimal, octal and shortened forms of IPv4 addresses.
  in_addr numeric{};
  if (inet_aton(std::string(host).c_str(), &numeric) != 0) {
    fail("replica URL '{}': '{}' is an IPv4 address in an unusual form; write it as a.b.c.d", url, host);
  }
  if (!is_host_name(host)) {
    fail("replica URL '{}': '{}' is neither an IP address nor a host name (letters, digits, '-' and '.')", url,
         host);
  }
  std::string lower_host(host);
  std::transform(lower_host.begin(), lower_host.end(), lower_host.begin(),
                 [](char c) { return is_letter(c) ? static_cast<char>(c | 0x20) : c; });
  return {fmt::format("http://{}:{}", lower_host, canonical_port), lower_host, canonical_port};
}

}  // namespace tern::gateway
