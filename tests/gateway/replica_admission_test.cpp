// Which replica addresses the gateway accepts: never link-local or unspecified ones, never its own listen address,
// and, for replicas added through /admin/replicas, only --allowed-replica-hosts when it is given.
#include "gateway/replica_admission.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tern::gateway {
namespace {

namespace ip = boost::asio::ip;

// The refusal's message, "" if the URL is admitted.
std::string refusal_of(const ReplicaAdmission& admission, std::string_view url,
                       ReplicaOrigin origin = ReplicaOrigin::kAdminApi) {
  try {
    admission.check(parse_replica_url(url), origin);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(ReplicaAdmissionTest, LinkLocalAndUnspecifiedAddressesAreAlwaysRefused) {
  const ReplicaAdmission admission({"0.0.0.0/0", "::/0"});  // an allow-list that allows everything
  for (const char* url : {"http://169.254.169.254:80", "http://169.254.0.1:8000", "http://[fe80::1]:8000",
                          "http://[febf:ffff::1]:8000", "http://[::ffff:169.254.169.254]:80", "http://0.0.0.0:8000",
                          "http://0.1.2.3:8000", "http://[::]:8000"}) {
    for (const ReplicaOrigin origin : {ReplicaOrigin::kAdminApi, ReplicaOrigin::kCommandLine}) {
      const std::string message = refusal_of(admission, url, origin);
      EXPECT_NE(message.find("link-local or unspecified"), std::string::npos) << url << ": " << message;
    }
  }
  EXPECT_EQ(refusal_of(admission, "http://169.253.255.255:80"), "");
  EXPECT_EQ(refusal_of(admission, "http://[fec0::1]:80"), "");
}

TEST(ReplicaAdmissionTest, ForbiddenDestinations) {
  EXPECT_TRUE(is_forbidden_destination(ip::make_address("169.254.169.254")));
  EXPECT_TRUE(is_forbidden_destination(ip::make_address("fe80::abcd")));
  EXPECT_TRUE(is_forbidden_destination(ip::make_address("::ffff:169.254.1.1")));
  EXPECT_TRUE(is_forbidden_destination(ip::make_address("0.0.0.0")));
  EXPECT_TRUE(is_forbidden_destination(ip::make_address("::")));
  EXPECT_FALSE(is_forbidden_destination(ip::make_address("127.0.0.1")));
  EXPECT_FALSE(is_forbidden_destination(ip::make_address("10.1.2.3")));
  EXPECT_FALSE(is_forbidden_destination(ip::make_address("::1")));
}

TEST(ReplicaAdmissionTest, TheGatewaysOwnAddressIsRefused) {
  ReplicaAdmission admission({});
  EXPECT_EQ(refusal_of(admission, "http://127.0.0.1:8080"), "");  // no listen address yet
  admission.set_listen_address(ip::make_address("127.0.0.1"), 8080);
  for (const char* url : {"http://127.0.0.1:8080", "http://localhost:8080", "http://LOCALHOST:8080",
                          "http://gw.localhost:8080", "http://[::ffff:127.0.0.1]:8080"}) {
    for (const ReplicaOrigin origin : {ReplicaOrigin::kAdminApi, ReplicaOrigin::kCommandLine}) {
      const std::string message = refusal_of(admission, url, origin);
      EXPECT_NE(message.find("gateway's own address"), std::string::npos) << url << ": " << message;
    }
  }
  EXPECT_EQ(refusal_of(admission, "http://127.0.0.1:8081"), "");   // another port
  EXPECT_EQ(refusal_of(admission, "http://127.0.0.2:8080"), "");   // another loopback address: not listened on
  EXPECT_EQ(refusal_of(admission, "http://10.0.0.1:8080"), "");
}

TEST(ReplicaAdmissionTest, AGatewayOnAllInterfacesIsReachedOnEveryLocalAddress) {
  ReplicaAdmission admission({});
  admission.set_listen_address(ip::make_address("0.0.0.0"), 9000);
  EXPECT_NE(refusal_of(admission, "http://127.0.0.1:9000"), "");
  EXPECT_NE(refusal_of(admission, "http://127.0.0.9:9000"), "");
  EXPECT_NE(refusal_of(admission, "http://localhost:9000"), "");
  EXPECT_NE(refusal_of(admission, "http://[::1]:9000"), "");
  EXPECT_EQ(refusal_of(admission, "http://192.0.2.1:9000"), "");  // TEST-NET-1: never a local interface
}

TEST(ReplicaAdmissionTest, TheAllowListBindsOnlyReplicasAddedAtRunTime) {
  const ReplicaAdmission admission({"10.0.0.0/8", "192.168.1.5", "fd00::/8", "Replica.Internal"});
  for (const char* url : {"http://10.1.2.3:8000", "http://10.255.255.255:1", "http://192.168.1.5:8000",
                          "http://[fd12::1]:8000", "http://[::ffff:10.0.0.1]:8000", "http://replica.internal:8000",
                          "http://REPLICA.internal:8000"}) {
    EXPECT_EQ(refusal_of(admission, url), "") << url;
  }
  for (const char* url : {"http://11.0.0.1:8000", "http://192.168.1.6:8000", "http://127.0.0.1:22",
                          "http://localhost:22", "http://[fe00::1]:8000", "http://other.internal:8000",
                          "http://sub.replica.internal:8000"}) {
    const std::string message = refusal_of(admission, url);
    EXPECT_NE(message.find("not in --allowed-replica-hosts"), std::string::npos) << url << ": " << message;
    EXPECT_EQ(refusal_of(admission, url, ReplicaOrigin::kCommandLine), "") << url;
  }
}

TEST(ReplicaAdmissionTest, WithoutAnAllowListAnyOrdinaryAddressIsAdmitted) {
  const ReplicaAdmission admission({});
  EXPECT_EQ(refusal_of(admission, "http://127.0.0.1:8001"), "");
  EXPECT_EQ(refusal_of(admission, "http://replica.internal:8001"), "");
}

TEST(ReplicaAdmissionTest, PrefixLengthsMatchBitByBit) {
  const ReplicaAdmission admission({"172.16.0.0/12", "10.0.0.0/0"});
  EXPECT_EQ(refusal_of(admission, "http://172.31.255.255:1"), "");
  EXPECT_EQ(refusal_of(admission, "http://1.2.3.4:1"), "");  // /0 matches every IPv4 address ...
  EXPECT_NE(refusal_of(admission, "http://[2001:db8::1]:1"), "");  // ... and no IPv6 one
  const ReplicaAdmission narrow({"172.16.0.0/12"});
  EXPECT_NE(refusal_of(narrow, "http://172.32.0.0:1"), "");
  EXPECT_NE(refusal_of(narrow, "http://172.15.255.255:1"), "");
}

TEST(ReplicaAdmissionTest, BadAllowListEntriesAreNamed) {
  for (const char* entry : {"10.0.0.0/33", "fd00::/129", "10.0.0.0/", "10.0.0.0/x", "not a host", "a_b", "[::1]",
                            "10.0.0.1/8/8", "host/8"}) {
    try {
      ReplicaAdmission admission({entry});
      ADD_FAILURE() << entry << " was accepted";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(entry), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace tern::gateway
