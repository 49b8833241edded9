#include "server/parameter_value_rules.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

#include "server/api_error.h"
#include "server/ebnf_rules.h"

namespace tern::server {

namespace {

// The schema keywords of a string that raw text can follow.
constexpr std::string_view kRawTextKeywords[] = {"type", "enum", "const", "title", "description", "default",
                                                 "examples"};

std::string class_character(const std::string& character) {
  return character.size() == 1 && std::string_view("/\\]^-").find(character[0]) != std::string_view::npos
             ? "\\" + character
             : character;
}

// After a '<' of the text: anything that does not go on to complete one of `rests` (the tags past their '<'), a nest
// of optional prefixes, one level per character matched so far.
std::string after_open(const std::vector<std::string_view>& rests) {
  std::map<std::string, std::vector<std::string_view>> by_first_character;
  for (std::string_view rest : rests) {
    size_t len = 1;
    while (len < rest.size() && (static_cast<unsigned char>(rest[len]) & 0xC0) == 0x80) ++len;
    by_first_character[std::string(rest.substr(0, len))].push_back(rest.substr(len));
  }
  std::string excluded = "<";
  std::string continuations;
  for (const auto& [character, remainders] : by_first_character) {
    excluded += class_character(character);
    bool completes_a_tag = false;
    for (std::string_view remainder : remainders) completes_a_tag = completes_a_tag || remainder.empty();
    if (!completes_a_tag) continuations += " | " + ebnf_literal(character) + " " + after_open(remainders);
  }
  return "([^" + excluded + "] [^<]*" + continuations + ")?";
}

}  // namespace

bool ObjectParameters::is_required(const std::string& key) const {
  return std::find(required.begin(), required.end(), Json(key)) != required.end();
}

ObjectParameters object_parameters(const Json& schema, std::string_view written_as) {
  if (!schema.is_object() || schema.value("type", Json("object")) != "object") {
    fail_param("tools", "a tool's 'parameters' must be an object schema to be written as {}, got {}", written_as,
               schema.dump());
  }
  ObjectParameters parameters{schema.value("properties", Json::object()), schema.value("required", Json::array())};
  if (!parameters.properties.is_object() || !parameters.required.is_array()) {
    fail_param("tools", "a tool's 'parameters' has 'properties' that are not an object or 'required' not a list");
  }
  return parameters;
}

std::string raw_text_rule(const std::string& rule_name, std::span<const std::string_view> end_tags) {
  std::vector<std::string_view> rests;
  for (std::string_view tag : end_tags) rests.push_back(tag.substr(1));
  return fmt::format("{} ::= [^<]* (\"<\" {})*\n", rule_name, after_open(rests));
}

bool raw_text_follows(const Json& property) {
  if (!property.is_object() || property.value("type", Json()) != "string") return false;
  for (const auto& [key, value] : property.items()) {
    bool known = false;
    for (std::string_view keyword : kRawTextKeywords) known = known || key == keyword;
    if (!known) return false;
  }
  return true;
}

std::string raw_text_value(const Json& property, const std::string& text_rule) {
  std::vector<Json> values;
  if (property.contains("const")) values.push_back(property["const"]);
  if (property.contains("enum")) {
    if (!property["enum"].is_array()) fail_param("tools", "a tool parameter's 'enum' must be a list");
    for (const Json& value : property["enum"]) values.push_back(value);
  }
  if (values.empty()) return text_rule;
  std::string alternatives;
  for (const Json& value : values) {
    if (!value.is_string()) fail_param("tools", "a string tool parameter lists the non-string value {}", value.dump());
    alternatives += (alternatives.empty() ? "" : " | ") + ebnf_literal(value.get<std::string>());
  }
  return "(" + alternatives + ")";
}

std::string json_value_rules(const Json& schema, const Json& property, const std::string& value_prefix) {
  Json value_schema = property;
  for (const char* defs : {"$defs", "definitions"}) {
    if (value_schema.is_object() && schema.contains(defs) && !value_schema.contains(defs)) {
      value_schema[defs] = schema[defs];
    }
  }
  return schema_rules(value_schema, value_prefix);
}

}  // namespace tern::server
