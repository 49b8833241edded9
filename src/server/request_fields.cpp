#include "server/request_fields.h"

#include <cmath>

#include "server/api_error.h"

namespace tern::server {

std::string json_type_name(const Json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number()) return "number";
  if (value.is_boolean()) return "boolean";
  return value.type_name();
}

RequestFields::RequestFields(const Json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {
  if (!object_.is_object()) {
    const std::string where = prefix_.empty() ? "the request body" : prefix_.substr(0, prefix_.size() - 1);
    throw ApiError(400, fmt::format("{} must be a JSON object, got {}", where, json_type_name(object_)),
                   prefix_.empty() ? std::nullopt : std::optional<std::string>(where));
  }
}

const Json* RequestFields::find(const char* name) const {
  const auto it = object_.find(name);
  if (it == object_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<int64_t> RequestFields::integer(const char* name, int64_t min, int64_t max) const {
  const Json* value = find(name);
  if (!value) return std::nullopt;
  if (!value->is_number_integer()) {
    fail_param(param(name), "'{}' must be an integer, got {}", param(name), json_type_name(*value));
  }
  // Unsigned values above INT64_MAX are out of every range we accept.
  if (value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    fail_param(param(name), "'{}' is {}, outside [{}, {}]", param(name), value->get<uint64_t>(), min, max);
  }
  const int64_t number = value->get<int64_t>();
  if (number < min || number > max) {
    fail_param(param(name), "'{}' is {}, outside [{}, {}]", param(name), number, min, max);
  }
  return number;
}

std::optional<double> RequestFields::number(const char* name, double min, double max) const {
  const Json* value = find(name);
  if (!value) return std::nullopt;
  if (!value->is_number()) fail_param(param(name), "'{}' must be a number, got {}", param(name), json_type_name(*value));
  const double number = value->get<double>();
  if (!std::isfinite(number) || number < min || number > max) {
    fail_param(param(name), "'{}' is {}, outside [{}, {}]", param(name), number, min, max);
  }
  return number;
}

std::optional<bool> RequestFields::boolean(const char* name) const {
  const Json* value = find(name);
  if (!value) return std::nullopt;
  if (!value->is_boolean()) fail_param(param(name), "'{}' must be a boolean, got {}", param(name), json_type_name(*value));
  return value->get<bool>();
}

std::optional<std::string> RequestFields::string(const char* name) const {
  const Json* value = find(name);
  if (!value) return std::nullopt;
  if (!value->is_string()) fail_param(param(name), "'{}' must be a string, got {}", param(name), json_type_name(*value));
  return value->get<std::string>();
}

std::vector<std::string> RequestFields::string_or_strings(const char* name) const {
  const Json* value = find(name);
  if (!value) return {};
  if (value->is_string()) return {value->get<std::string>()};
  if (!value->is_array()) {
    fail_param(param(name), "'{}' must be a string or a list of strings, got {}", param(name), json_type_name(*value));
  }
  std::vector<std::string> strings;
  for (size_t i = 0; i < value->size(); ++i) {
    const Json& item = (*value)[i];
    if (!item.is_string()) {
      fail_param(param(name), "'{}[{}]' must be a string, got {}", param(name), i, json_type_name(item));
    }
    strings.push_back(item.get<std::string>());
  }
  return strings;
}

}  // namespace tern::server
