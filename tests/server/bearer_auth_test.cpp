// API keys as clients send them: the Bearer scheme in any case (RFC 7235 section 2.1), the comparison, the 401s,
// and the keys the CLI refuses to start with.
#include "server/bearer_auth.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "server/api_error.h"

namespace tern::server {
namespace {

TEST(BearerTokenTest, SchemeMatchesInAnyCase) {
  EXPECT_EQ(bearer_token("Bearer sekrit"), "sekrit");
  EXPECT_EQ(bearer_token("bearer sekrit"), "sekrit");
  EXPECT_EQ(bearer_token("BEARER sekrit"), "sekrit");
  EXPECT_EQ(bearer_token("bEaReR sekrit"), "sekrit");
}

TEST(BearerTokenTest, SpacesAroundTheKeyAreNotPartOfIt) {
  EXPECT_EQ(bearer_token("Bearer   sekrit  "), "sekrit");
  EXPECT_EQ(bearer_token("Bearer\tsekrit"), "sekrit");
  EXPECT_EQ(bearer_token("Bearer a/b+c="), "a/b+c=");  // token68 characters pass as sent
}

TEST(BearerTokenTest, OtherSchemesAndNoCredentialsAreNoToken) {
  EXPECT_EQ(bearer_token(""), std::nullopt);
  EXPECT_EQ(bearer_token("sekrit"), std::nullopt);
  EXPECT_EQ(bearer_token("Basic c2Vrcml0"), std::nullopt);
  EXPECT_EQ(bearer_token("Bearersekrit"), std::nullopt);
  EXPECT_EQ(bearer_token("Bearer"), std::nullopt);
  EXPECT_EQ(bearer_token("Bearer   "), std::nullopt);
  EXPECT_EQ(bearer_token("Bear sekrit"), std::nullopt);
}

TEST(SameSecretTest, EqualOnlyWhenEveryByteAndTheLengthMatch) {
  EXPECT_TRUE(same_secret("sekrit", "sekrit"));
  EXPECT_TRUE(same_secret("", ""));
  EXPECT_FALSE(same_secret("sekriT", "sekrit"));
  EXPECT_FALSE(same_secret("Sekrit", "sekrit"));
  EXPECT_FALSE(same_secret("sekri", "sekrit"));       // a prefix
  EXPECT_FALSE(same_secret("sekrit2", "sekrit"));     // longer
  EXPECT_FALSE(same_secret("", "sekrit"));
  EXPECT_FALSE(same_secret("sekrit", ""));
  EXPECT_FALSE(same_secret(std::string("sek\0it", 6), "sekrit"));
  EXPECT_FALSE(same_secret("sek", std::string("sek\0\0\0", 6)));  // not padded with NUL bytes to match
}

int status_of(std::string_view authorization, const std::string& key) {
  try {
    require_bearer_key(authorization, key);
    return 200;
  } catch (const ApiError& error) {
    EXPECT_EQ(error.code().value_or(""), "invalid_api_key");
    return error.status();
  }
}

TEST(RequireBearerKeyTest, AcceptsTheKeyInAnySchemeCaseAndRefusesTheRestWith401) {
  EXPECT_EQ(status_of("Bearer sekrit", "sekrit"), 200);
  EXPECT_EQ(status_of("bearer sekrit", "sekrit"), 200);
  EXPECT_EQ(status_of("", "sekrit"), 401);
  EXPECT_EQ(status_of("sekrit", "sekrit"), 401);
  EXPECT_EQ(status_of("Bearer wrong", "sekrit"), 401);
  EXPECT_EQ(status_of("Bearer sekri", "sekrit"), 401);
  EXPECT_EQ(status_of("Basic sekrit", "sekrit"), 401);
}

std::string refusal_of(std::string_view key) {
  try {
    check_api_key_value(key, "--api-key");
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(CheckApiKeyValueTest, RefusesEmptyKeysNamingTheOption) {
  const std::string message = refusal_of("");
  EXPECT_NE(message.find("--api-key"), std::string::npos) << message;
  EXPECT_NE(message.find("empty"), std::string::npos) << message;
}

TEST(CheckApiKeyValueTest, RefusesKeysNoHeaderCanCarry) {
  EXPECT_NE(refusal_of(" sekrit"), "");
  EXPECT_NE(refusal_of("sekrit "), "");
  EXPECT_NE(refusal_of("sek rit"), "");
  EXPECT_NE(refusal_of("sek\nrit"), "");
  EXPECT_NE(refusal_of("sek\x7frit"), "");
}

TEST(CheckApiKeyValueTest, AcceptsPrintableKeys) {
  EXPECT_EQ(refusal_of("sekrit"), "");
  EXPECT_EQ(refusal_of("sk-proj_AbC.123/+="), "");
}

}  // namespace
}  // namespace tern::server
