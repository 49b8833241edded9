#include "grammar/json_schema_validator.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "core/error.h"
#include "core/nesting_limit.h"
#include "grammar/json_schema_formats.h"

namespace tern::grammar {
namespace {

using json = nlohmann::ordered_json;

Verdict verdict(bool valid) { return valid ? Verdict::kValid : Verdict::kInvalid; }

// Both must hold.
Verdict both(Verdict a, Verdict b) {
  if (a == Verdict::kInvalid || b == Verdict::kInvalid) return Verdict::kInvalid;
  return a == Verdict::kValid && b == Verdict::kValid ? Verdict::kValid : Verdict::kUnknown;
}

// One of them must hold.
Verdict either(Verdict a, Verdict b) {
  if (a == Verdict::kValid || b == Verdict::kValid) return Verdict::kValid;
  return a == Verdict::kInvalid && b == Verdict::kInvalid ? Verdict::kInvalid : Verdict::kUnknown;
}

Verdict negation(Verdict v) {
  if (v == Verdict::kUnknown) return v;
  return v == Verdict::kValid ? Verdict::kInvalid : Verdict::kValid;
}

bool is_integral(const json& value) {
  if (value.is_number_integer()) return true;
  double v = value.get<double>();
  return std::isfinite(v) && v == std::trunc(v);
}

bool has_type(const json& value, const std::string& type) {
  if (type == "null") return value.is_null();
  if (type == "boolean") return value.is_boolean();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "number") return value.is_number();
  if (type == "integer") return value.is_number() && is_integral(value);
  fail("unknown type '{}'", type);
}

size_t num_codepoints(const std::string& text) {
  size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

double number_keyword(const json& schema, const char* key) {
  if (!schema[key].is_number()) fail("'{}' must be a number", key);
  return schema[key].get<double>();
}

// ajv-formats checks these exactly; the converter's regexes for them are subsets.
const std::set<std::string, std::less<>> kReferenceFormats = {
    "date", "time", "date-time", "iso-time", "iso-date-time", "duration", "uri", "uri-reference", "uri-template",
    "url", "email", "hostname", "ipv4", "ipv6", "regex", "uuid", "json-pointer", "json-pointer-uri-fragment",
    "relative-json-pointer", "byte"};

}  // namespace

bool json_equal(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) return a == b;
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!json_equal(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [key, value] : a.items()) {
      auto it = b.find(key);
      if (it == b.end() || !json_equal(value, *it)) return false;
    }
    return true;
  }
  return a == b;
}

Verdict JsonSchemaValidator::check(const json& value, const json& schema) { return check_at(value, schema, 0); }

Verdict JsonSchemaValidator::pattern_verdict(const std::string& pattern, const std::string& text) {
  auto& search = patterns_[pattern];
  if (!search) search = std::make_unique<SchemaPatternSearch>(pattern);
  if (search->found_in(text)) return Verdict::kValid;
  return search->exact() ? Verdict::kInvalid : Verdict::kUnknown;
}

Verdict JsonSchemaValidator::check_at(const json& value, const json& schema, int depth) {
  if (depth > kMaxNestingDepth) fail("schema {} (or a $ref cycle)", nesting_limit_message());
  if (schema.is_boolean()) return verdict(schema.get<bool>());
  if (!schema.is_object()) fail("a schema must be an object or a boolean");
  for (const char* key : {"unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"}) {
    if (schema.contains(key)) fail("keyword '{}' is not supported", key);
  }
  Verdict result = Verdict::kValid;
  auto sub = [&](const json& s) { return check_at(value, s, depth + 1); };
  auto subschemas = [&](const char* key) -> const json& {
    const json& list = schema[key];
    if (!list.is_array() || list.empty()) fail("'{}' must be a non-empty array", key);
    return list;
  };

  if (schema.contains("$ref")) {
    if (!schema["$ref"].is_string()) fail("$ref must be a string");
    std::string ref = schema["$ref"].get<std::string>();
    if (ref.empty() || ref[0] != '#') fail("only local $ref (\"#...\") is supported, got '{}'", ref);
    const json* target = nullptr;
    try {
      target = &root_.at(json::json_pointer(ref.substr(1)));
    } catch (const json::exception& e) {
      fail("$ref '{}' does not resolve: {}", ref, e.what());
    }
    result = both(result, check_at(value, *target, depth + 1));
    if (refs_hide_siblings_) return result;
  }
  if (schema.contains("type")) {
    const json& type = schema["type"];
    bool matched = false;
    if (type.is_string()) {
      matched = has_type(value, type.get<std::string>());
    } else if (type.is_array()) {
      for (const auto& t : type) matched |= t.is_string() && has_type(value, t.get<std::string>());
    } else {
      fail("'type' must be a string or an array of strings");
    }
    matched |= value.is_null() && schema.value("nullable", false) == true;
    result = both(result, verdict(matched));
  }
  if (schema.contains("enum")) {
    if (!schema["enum"].is_array()) fail("'enum' must be an array");
    bool found = false;
    for (const auto& candidate : schema["enum"]) found |= json_equal(candidate, value);
    result = both(result, verdict(found));
  }
  if (schema.contains("const")) result = both(result, verdict(json_equal(schema["const"], value)));
  if (result == Verdict::kInvalid) return result;

  if (value.is_number()) result = both(result, check_number(value, schema));
  if (value.is_string()) result = both(result, check_string(value.get<std::string>(), schema));
  if (value.is_array()) result = both(result, check_array(value, schema, depth));
  if (value.is_object()) result = both(result, check_object(value, schema, depth));
  if (result == Verdict::kInvalid) return result;

  if (schema.contains("allOf")) {
    for (const auto& s : subschemas("allOf")) result = both(result, sub(s));
  }
  if (schema.contains("anyOf")) {
    Verdict any = Verdict::kInvalid;
    for (const auto& s : subschemas("anyOf")) any = either(any, sub(s));
    result = both(result, any);
  }
  if (schema.contains("oneOf")) {
    size_t num_valid = 0, num_unknown = 0;
    for (const auto& s : subschemas("oneOf")) {
      Verdict v = sub(s);
      num_valid += v == Verdict::kValid;
      num_unknown += v == Verdict::kUnknown;
    }
    Verdict one = Verdict::kUnknown;
    if (num_valid > 1 || num_valid + num_unknown == 0) one = Verdict::kInvalid;
    if (num_valid == 1 && num_unknown == 0) one = Verdict::kValid;
    result = both(result, one);
  }
  if (schema.contains("not")) result = both(result, negation(sub(schema["not"])));
  if (schema.contains("if") && (schema.contains("then") || schema.contains("else"))) {
    Verdict condition = sub(schema["if"]);
    Verdict then_branch = schema.contains("then") ? sub(schema["then"]) : Verdict::kValid;
    Verdict else_branch = schema.contains("else") ? sub(schema["else"]) : Verdict::kValid;
    if (condition == Verdict::kValid) {
      result = both(result, then_branch);
    } else if (condition == Verdict::kInvalid) {
      result = both(result, else_branch);
    } else {
      result = both(result, then_branch == else_branch ? then_branch : Verdict::kUnknown);
    }
  }
  return result;
}

Verdict JsonSchemaValidator::check_number(const json& value, const json& schema) {
  double v = value.get<double>();
  bool valid = true;
  // Draft 4 spells exclusive bounds as booleans beside minimum/maximum.
  bool exclusive_min_flag = schema.contains("exclusiveMinimum") && schema["exclusiveMinimum"] == true;
  bool exclusive_max_flag = schema.contains("exclusiveMaximum") && schema["exclusiveMaximum"] == true;
  if (schema.contains("minimum")) {
    double m = number_keyword(schema, "minimum");
    valid &= exclusive_min_flag ? v > m : v >= m;
  }
  if (schema.contains("maximum")) {
    double m = number_keyword(schema, "maximum");
    valid &= exclusive_max_flag ? v < m : v <= m;
  }
  if (schema.contains("exclusiveMinimum") && !schema["exclusiveMinimum"].is_boolean()) {
    valid &= v > number_keyword(schema, "exclusiveMinimum");
  }
  if (schema.contains("exclusiveMaximum") && !schema["exclusiveMaximum"].is_boolean()) {
    valid &= v < number_keyword(schema, "exclusiveMaximum");
  }
  if (schema.contains("multipleOf")) {
    double m = number_keyword(schema, "multipleOf");
    if (m <= 0) fail("'multipleOf' must be greater than 0");
    // As ajv decides it: the quotient, in doubles, must be an integer that JavaScript's parseInt reads back.
    double quotient = v / m;
    valid &= std::isfinite(quotient) && quotient == std::trunc(quotient) && std::fabs(quotient) < 1e21;
  }
  if (schema.contains("format") && schema["format"].is_string()) {
    if (auto range = integer_format_range(schema["format"].get<std::string>())) {
      valid &= is_integral(value);
      if (schema["format"] == "int32") valid &= v >= static_cast<double>(range->lo) && v <= static_cast<double>(range->hi);
    }
  }
  return verdict(valid);
}

Verdict JsonSchemaValidator::check_string(const std::string& value, const json& schema) {
  Verdict result = Verdict::kValid;
  size_t length = num_codepoints(value);
  if (schema.contains("minLength")) result = both(result, verdict(length >= schema["minLength"].get<double>()));
  if (schema.contains("maxLength")) result = both(result, verdict(length <= schema["maxLength"].get<double>()));
  if (schema.contains("pattern")) {
    if (!schema["pattern"].is_string()) fail("'pattern' must be a string");
    result = both(result, pattern_verdict(schema["pattern"].get<std::string>(), value));
  }
  if (schema.contains("format") && schema["format"].is_string()) {
    std::string format = schema["format"].get<std::string>();
    if (auto regex = string_format_regex(format)) {
      Verdict matched = pattern_verdict("^(?:" + *regex + ")$", value);
      // The regex is a subset of the format: a string outside it may still be valid.
      bool reference_format = kReferenceFormats.count(format) > 0;
      result = both(result, matched == Verdict::kValid || !reference_format ? Verdict::kValid : Verdict::kUnknown);
    } else if (kReferenceFormats.count(format)) {
      result = both(result, Verdict::kUnknown);
    }
  }
  return result;
}

Verdict JsonSchemaValidator::check_array(const json& value, const json& schema, int depth) {
  Verdict result = Verdict::kValid;
  if (schema.contains("minItems")) result = both(result, verdict(value.size() >= schema["minItems"].get<double>()));
  if (schema.contains("maxItems")) result = both(result, verdict(value.size() <= schema["maxItems"].get<double>()));
  // Items past the tuple (prefixItems, or draft 4's array-valued items) follow items/additionalItems.
  const json* tuple = nullptr;
  const json* rest = nullptr;
  if (schema.contains("prefixItems")) {
    tuple = &schema["prefixItems"];
    if (schema.contains("items")) rest = &schema["items"];
  } else if (schema.contains("items") && schema["items"].is_array()) {
    tuple = &schema["items"];
    if (schema.contains("additionalItems")) rest = &schema["additionalItems"];
  } else if (schema.contains("items")) {
    rest = &schema["items"];
  }
  for (size_t i = 0; i < value.size() && result != Verdict::kInvalid; ++i) {
    if (tuple && i < tuple->size()) {
      result = both(result, check_at(value[i], (*tuple)[i], depth + 1));
    } else if (rest) {
      result = both(result, check_at(value[i], *rest, depth + 1));
    }
  }
  if (schema.value("uniqueItems", false) == true) {
    for (size_t i = 0; i < value.size(); ++i) {
      for (size_t j = i + 1; j < value.size(); ++j) {
        if (json_equal(value[i], value[j])) return Verdict::kInvalid;
      }
    }
  }
  if (schema.contains("contains")) {
    size_t num_valid = 0, num_unknown = 0;
    for (const auto& item : value) {
      Verdict v = check_at(item, schema["contains"], depth + 1);
      num_valid += v == Verdict::kValid;
      num_unknown += v == Verdict::kUnknown;
    }
    double lo = schema.contains("minContains") ? schema["minContains"].get<double>() : 1;
    double hi = schema.contains("maxContains") ? schema["maxContains"].get<double>() : INFINITY;
    if (num_valid >= lo && num_valid + num_unknown <= hi) {
      result = both(result, Verdict::kValid);
    } else if (num_valid + num_unknown < lo || num_valid > hi) {
      result = Verdict::kInvalid;
    } else {
      result = both(result, Verdict::kUnknown);
    }
  }
  return result;
}

Verdict JsonSchemaValidator::check_object(const json& value, const json& schema, int depth) {
  Verdict result = Verdict::kValid;
  if (schema.contains("minProperties")) result = both(result, verdict(value.size() >= schema["minProperties"].get<double>()));
  if (schema.contains("maxProperties")) result = both(result, verdict(value.size() <= schema["maxProperties"].get<double>()));
  auto require = [&](const json& names) {
    if (!names.is_array()) fail("'required' must be an array of strings");
    for (const auto& name : names) {
      if (!name.is_string()) fail("'required' must be an array of strings");
      if (!value.contains(name.get<std::string>())) result = Verdict::kInvalid;
    }
  };
  if (schema.contains("required")) require(schema["required"]);
  const json* properties = schema.contains("properties") ? &schema["properties"] : nullptr;
  const json* patterns = schema.contains("patternProperties") ? &schema["patternProperties"] : nullptr;
  for (const auto& [key, member] : value.items()) {
    if (result == Verdict::kInvalid) return result;
    bool declared = false;
    bool maybe_declared = false;  // by a pattern with anchors that the key is not a whole match of
    if (properties && properties->contains(key)) {
      declared = true;
      result = both(result, check_at(member, (*properties)[key], depth + 1));
    }
    if (patterns) {
      for (const auto& [pattern, pattern_schema] : patterns->items()) {
        Verdict found = pattern_verdict(pattern, key);
        if (found == Verdict::kInvalid) continue;
        Verdict member_verdict = check_at(member, pattern_schema, depth + 1);
        if (found == Verdict::kValid) {
          declared = true;
          result = both(result, member_verdict);
        } else {
          maybe_declared = true;
          if (member_verdict != Verdict::kValid) result = both(result, Verdict::kUnknown);
        }
      }
    }
    if (!declared && schema.contains("additionalProperties")) {
      Verdict additional = check_at(member, schema["additionalProperties"], depth + 1);
      result = both(result, maybe_declared && additional != Verdict::kValid ? Verdict::kUnknown : additional);
    }
    if (schema.contains("propertyNames")) result = both(result, check_at(json(key), schema["propertyNames"], depth + 1));
  }
  if (schema.contains("dependentRequired")) {
    for (const auto& [key, names] : schema["dependentRequired"].items()) {
      if (value.contains(key)) require(names);
    }
  }
  if (schema.contains("dependentSchemas")) {
    for (const auto& [key, dependent] : schema["dependentSchemas"].items()) {
      if (value.contains(key)) result = both(result, check_at(value, dependent, depth + 1));
    }
  }
  if (schema.contains("dependencies")) {
    for (const auto& [key, dependency] : schema["dependencies"].items()) {
      if (!value.contains(key)) continue;
      if (dependency.is_array()) {
        require(dependency);
      } else {
        result = both(result, check_at(value, dependency, depth + 1));
      }
    }
  }
  return result;
}

}  // namespace tern::grammar
