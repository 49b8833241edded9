#include "server/bearer_auth.h"

#include "core/error.h"
#include "server/api_error.h"

namespace tern::server {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string_view> bearer_token(std::string_view authorization) {
  static constexpr std::string_view kScheme = "bearer";
  authorization = trim(authorization);
  if (authorization.size() <= kScheme.size() || !is_space(authorization[kScheme.size()]) ||
      !equals_ignoring_case(authorization.substr(0, kScheme.size()), kScheme)) {
    return std::nullopt;
  }
  const std::string_view token = trim(authorization.substr(kScheme.size()));
  if (token.empty()) return std::nullopt;
  return token;
}

bool same_secret(std::string_view given, std::string_view expected) {
  // Every byte of `expected` is visited whatever `given` holds; a length mismatch only sets a bit.
  size_t difference = given.size() ^ expected.size();
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char given_byte = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    difference |= given_byte ^ static_cast<unsigned char>(expected[i]);
  }
  return difference == 0;
}

void require_bearer_key(std::string_view authorization, const std::string& key) {
  const std::optional<std::string_view> token = bearer_token(authorization);
  if (!token) {
    throw ApiError(401, "missing API key: send it as 'Authorization: Bearer <key>'", std::nullopt, "invalid_api_key");
  }
  if (!same_secret(*token, key)) throw ApiError(401, "incorrect API key", std::nullopt, "invalid_api_key");
}

void check_api_key_value(std::string_view key, std::string_view option) {
  if (key.empty()) {
    fail("{}: the key is empty (an unset variable?), which would switch authentication off; give a non-empty key, "
         "or leave it out to run without one", option);
  }
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte <= 0x20 || byte == 0x7f) {
      fail("{}: the key holds whitespace or a control character (byte 0x{:02x}), which an HTTP header cannot "
           "carry intact", option, byte);
    }
  }
}

}  // namespace tern::server
