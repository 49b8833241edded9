// Replica URLs: what parse_replica_url accepts and normalizes, and what it refuses because a resolver or an HTTP
// client would read it differently than it looks (credentials, paths, numeric hosts in unusual forms).
#include "gateway/replica_address.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tern::gateway {
namespace {

TEST(ReplicaAddressTest, AcceptsHttpUrlsAndNormalizesThem) {
  const ReplicaAddress plain = parse_replica_url("http://127.0.0.1:8001");
  EXPECT_EQ(plain.url, "http://127.0.0.1:8001");
  EXPECT_EQ(plain.host, "127.0.0.1");
  EXPECT_EQ(plain.port, "8001");
  EXPECT_EQ(plain.authority(), "127.0.0.1:8001");
  EXPECT_EQ(parse_replica_url("http://127.0.0.1:8001/").url, "http://127.0.0.1:8001");
  EXPECT_EQ(parse_replica_url("10.0.0.7:80").url, "http://10.0.0.7:80");
  EXPECT_EQ(parse_replica_url("HTTP://Replica-1.Internal:08000").url, "http://replica-1.internal:8000");
}

TEST(ReplicaAddressTest, Ipv6AddressesGoInBrackets) {
  const ReplicaAddress v6 = parse_replica_url("http://[::1]:8000");
  EXPECT_EQ(v6.url, "http://[::1]:8000");
  EXPECT_EQ(v6.host, "::1");  // what the resolver and connect take
  EXPECT_EQ(v6.authority(), "[::1]:8000");
  EXPECT_EQ(parse_replica_url("http://[FD00:0::5]:1").url, "http://[fd00::5]:1");
  EXPECT_THROW(parse_replica_url("http://::1:8000"), Error);
  EXPECT_THROW(parse_replica_url("http://[::1:8000"), Error);
  EXPECT_THROW(parse_replica_url("http://[fe80::1%eth0]:8000"), Error);
  EXPECT_THROW(parse_replica_url("http://[not-v6]:8000"), Error);
}

// The message names the URL and says what is wrong with it.
std::string refusal_of(std::string_view url) {
  try {
    parse_replica_url(url);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(ReplicaAddressTest, RefusesOtherSchemes) {
  EXPECT_NE(refusal_of("ftp://x:21").find("only http://"), std::string::npos);
  EXPECT_NE(refusal_of("https://replica:443").find("https is not supported"), std::string::npos);
  EXPECT_NE(refusal_of("file:///etc/passwd"), "");
}

TEST(ReplicaAddressTest, RefusesCredentials) {
  const std::string message = refusal_of("http://user:pass@10.0.0.1:8000");
  EXPECT_NE(message.find("http://user:pass@10.0.0.1:8000"), std::string::npos) << message;
  EXPECT_NE(message.find("credentials"), std::string::npos) << message;
  EXPECT_NE(refusal_of("http://evil.example@10.0.0.1:8000"), "");
  EXPECT_NE(refusal_of("http://10.0.0.1:8000@evil.example:80"), "");
}

TEST(ReplicaAddressTest, RefusesPathsQueriesAndFragments) {
  EXPECT_NE(refusal_of("http://10.0.0.1:8000/v1").find("no path, query or fragment"), std::string::npos);
  EXPECT_NE(refusal_of("http://10.0.0.1:8000?x=1"), "");
  EXPECT_NE(refusal_of("http://10.0.0.1:8000#frag"), "");
  EXPECT_NE(refusal_of("http://a?b:80"), "");
  EXPECT_NE(refusal_of("http://a#b:80"), "");
  EXPECT_NE(refusal_of("http://10.0.0.1:8000//"), "");
  EXPECT_NE(refusal_of("http://a\\b:80"), "");
}

TEST(ReplicaAddressTest, RefusesHostsThatAreNotAddressesOrNames) {
  EXPECT_NE(refusal_of("http://:8000"), "");
  EXPECT_NE(refusal_of("http://a b:8000"), "");
  EXPECT_NE(refusal_of("http://a%2e:8000"), "");
  EXPECT_NE(refusal_of("http://-a:8000"), "");
  EXPECT_NE(refusal_of("http://a..b:8000"), "");
  EXPECT_NE(refusal_of("http://localhost.:8000"), "");
  EXPECT_NE(refusal_of("http://replica:"), "");
  EXPECT_NE(refusal_of("http://replica:0"), "");
  EXPECT_NE(refusal_of("http://replica:65536"), "");
  EXPECT_NE(refusal_of("http://replica:80a"), "");
}

// getaddrinfo reads these as IPv4 addresses (inet_aton): 169.254.169.254 and 127.0.0.1 in disguise.
TEST(ReplicaAddressTest, RefusesIpv4AddressesInUnusualForms) {
  for (const char* url : {"http://2852039166:80", "http://0xa9fea9fe:80", "http://0251.0376.0251.0376:80",
                          "http://169.254.43518:80", "http://127.1:22", "http://0x7f.0.0.1:22",
                          "http://017700000001:22", "http://127.000.0.1:22"}) {
    EXPECT_NE(refusal_of(url), "") << url;
  }
}

TEST(ReplicaAddressTest, HostNames) {
  EXPECT_TRUE(is_host_name("localhost"));
  EXPECT_TRUE(is_host_name("replica-1.svc.cluster.local"));
  EXPECT_TRUE(is_host_name("1replica.internal"));
  EXPECT_FALSE(is_host_name(""));
  EXPECT_FALSE(is_host_name("10.0.0.1"));  // the last label all digits: an address, not a name
  EXPECT_FALSE(is_host_name("a_b"));
  EXPECT_FALSE(is_host_name("a-.b"));
  EXPECT_FALSE(is_host_name(".a"));
  EXPECT_FALSE(is_host_name(std::string(64, 'a')));
}

}  // namespace
}  // namespace tern::gateway
