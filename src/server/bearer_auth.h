#pragma once
// API keys as clients send them: "Authorization: Bearer <key>". Shared by `tern serve` (--api-key) and
// `tern gateway` (--admin-api-key).
#include <optional>
#include <string>
#include <string_view>

namespace tern::server {

// The credentials of a Bearer Authorization header: nullopt for any other scheme, none, or no credentials. The
// scheme is matched without regard to case (RFC 7235 section 2.1: "bearer" and "BEARER" are "Bearer"); the key
// is taken as sent, without the spaces around it.
std::optional<std::string_view> bearer_token(std::string_view authorization);

// Whether `given` equals `expected`, in time that depends only on expected's length: how long a wrong guess takes
// tells nothing about how much of it was right.
bool same_secret(std::string_view given, std::string_view expected);

// Throws ApiError 401 ("invalid_api_key") unless `authorization` carries `key` as a Bearer token.
void require_bearer_key(std::string_view authorization, const std::string& key);

// Throws tern::Error naming `option` if `key` cannot serve as an API key: empty (typically an unset shell
// variable, which would otherwise switch authentication off) or holding whitespace or control characters (HTTP
// trims or refuses them in a header, so no client could send the key).
void check_api_key_value(std::string_view key, std::string_view option);

}  // namespace tern::server
