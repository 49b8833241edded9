// The request-head checks against RFC 9112: framing a proxy could read differently (sections 6.1 and 6.3) and the
// Host requirement (section 3.2). Each case names the RFC rule it exercises.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>

#include "server/request_head.h"

namespace tern::server {
namespace {

namespace http = boost::beast::http;

http::request_header<> head(std::initializer_list<std::pair<http::field, std::string>> fields, unsigned version = 11) {
  http::request_header<> h;
  h.method(http::verb::post);
  h.target("/v1/completions");
  h.version(version);
  for (const auto& [name, value] : fields) h.insert(name, value);
  return h;
}

const auto kHost = std::pair{http::field::host, std::string("x")};

TEST(RequestHeadTest, AcceptsOrdinaryFraming) {
  EXPECT_EQ(request_head_error(head({kHost})), std::nullopt);
  EXPECT_EQ(request_head_error(head({kHost, {http::field::content_length, "12"}})), std::nullopt);
  EXPECT_EQ(request_head_error(head({kHost, {http::field::transfer_encoding, "chunked"}})), std::nullopt);
  EXPECT_EQ(request_head_error(head({kHost, {http::field::transfer_encoding, "Chunked"}})), std::nullopt);
  EXPECT_EQ(request_head_error(head({}, 10)), std::nullopt) << "HTTP/1.0 needs no Host";
}

TEST(RequestHeadTest, HttpOneOneNeedsExactlyOneHost) {
  const auto missing = request_head_error(head({{http::field::content_length, "2"}}));
  ASSERT_TRUE(missing);
  EXPECT_NE(missing->find("Host"), std::string::npos) << *missing;
  const auto twice = request_head_error(head({kHost, {http::field::host, "y"}}));
  ASSERT_TRUE(twice);
  EXPECT_NE(twice->find("more than one Host"), std::string::npos) << *twice;
}

TEST(RequestHeadTest, OnlyChunkedTransferEncodingIsAccepted) {
  for (const char* coding : {"xchunked", "chunked, identity", "gzip", "identity", "gzip, chunked", "chunked, chunked"}) {
    const auto error = request_head_error(head({kHost, {http::field::transfer_encoding, coding}}));
    ASSERT_TRUE(error) << coding;
    EXPECT_NE(error->find(coding), std::string::npos) << *error;
  }
  // The codings of several field lines form one list: "gzip" then "chunked" is "gzip, chunked".
  const auto split = request_head_error(
      head({kHost, {http::field::transfer_encoding, "gzip"}, {http::field::transfer_encoding, "chunked"}}));
  ASSERT_TRUE(split);
  EXPECT_NE(split->find("'gzip, chunked'"), std::string::npos) << *split;
  EXPECT_TRUE(request_head_error(head({{http::field::transfer_encoding, "chunked"}}, 10)))
      << "an HTTP/1.0 message with Transfer-Encoding has faulty framing";
}

TEST(RequestHeadTest, ContentLengthMustBeSingleAndAlone) {
  const auto both = request_head_error(
      head({kHost, {http::field::transfer_encoding, "gzip"}, {http::field::content_length, "5"}}));
  ASSERT_TRUE(both);
  EXPECT_NE(both->find("both Transfer-Encoding and Content-Length"), std::string::npos) << *both;
  EXPECT_TRUE(request_head_error(
      head({kHost, {http::field::content_length, "5"}, {http::field::transfer_encoding, "chunked"}})));
  EXPECT_TRUE(request_head_error(head({kHost, {http::field::content_length, "5"}, {http::field::content_length, "5"}})));
  EXPECT_TRUE(request_head_error(head({kHost, {http::field::content_length, "5"}, {http::field::content_length, "6"}})));
  const auto list = request_head_error(head({kHost, {http::field::content_length, "5, 5"}}));
  ASSERT_TRUE(list);
  EXPECT_NE(list->find("Content-Length (5, 5)"), std::string::npos) << *list;
}

}  // namespace
}  // namespace tern::server
