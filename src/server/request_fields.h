#pragma once
// Typed access to the fields of a JSON request object, as OpenAI's API types them. A field that is absent or
// null reads as nullopt (clients send null for "unset"); a present field of the wrong type or out of range throws
// a 400 ApiError naming it. Fields this reader is never asked about are ignored, as OpenAI and vLLM ignore them.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tern::server {

using Json = nlohmann::ordered_json;  // ordered: tool schemas reach the prompt in the client's key order

class RequestFields {
 public:
  // Throws a 400 ApiError unless `object` is a JSON object. `prefix` is put before field names in errors.
  explicit RequestFields(const Json& object, std::string prefix = "");

  // The field if present and not null.
  const Json* find(const char* name) const;
  std::optional<int64_t> integer(const char* name, int64_t min, int64_t max) const;
  // Integers are numbers too; NaN and infinities never get through JSON, huge values fail the range.
  std::optional<double> number(const char* name, double min, double max) const;
  std::optional<bool> boolean(const char* name) const;
  std::optional<std::string> string(const char* name) const;
  // A string or a list of strings, as `stop` is.
  std::vector<std::string> string_or_strings(const char* name) const;
  std::string param(const char* name) const { return prefix_ + name; }

 private:
  const Json& object_;
  std::string prefix_;
};

// The JSON type name a client would recognize: "integer", "number", "string", "boolean", "array", "object", "null".
std::string json_type_name(const Json& value);

}  // namespace tern::server
