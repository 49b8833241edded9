#include "server/dsml_arguments_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/ebnf_rules.h"

namespace tern::server {

namespace {

constexpr std::string_view kParameterOpen = "<｜DSML｜parameter name=\"";
constexpr std::string_view kParameterClose = "</｜DSML｜parameter>";
// The schema keywords of a string that raw text can follow; any other keyword makes the value JSON.
constexpr std::string_view kRawTextKeywords[] = {"type", "enum", "const", "title", "description", "default",
                                                 "examples"};

// Text without the closing tag. The tag has its only '<' at its start, so the text is runs without '<', each after a
// '<', none of which starts with the rest of the tag (a nest of optional prefixes, one per character); and text
// followed by the tag holds that tag first where the grammar put it, which is where the parser ends the value.
std::string raw_text_rule(const std::string& rule_name) {
  const std::string_view tag_rest = kParameterClose.substr(1);
  std::string piece;
  size_t num_open = 0;
  for (size_t pos = 0; pos < tag_rest.size();) {
    size_t len = 1;
    while (pos + len < tag_rest.size() && (static_cast<unsigned char>(tag_rest[pos + len]) & 0xC0) == 0x80) ++len;
    const std::string character(tag_rest.substr(pos, len));
    const std::string class_character = character == "/" ? "\\/" : character;
    piece += "([^<" + class_character + "] [^<]*";
    pos += len;
    if (pos < tag_rest.size()) {
      piece += " | " + ebnf_literal(character) + " ";
      ++num_open;
    }
  }
  for (size_t i = 0; i < num_open; ++i) piece += ")?";
  piece += ")?";
  return fmt::format("{} ::= [^<]* (\"<\" {})*\n", rule_name, piece);
}

bool is_raw_text(const Json& property) {
  if (!property.is_object() || property.value("type", Json()) != "string") return false;
  for (const auto& [key, value] : property.items()) {
    bool known = false;
    for (std::string_view keyword : kRawTextKeywords) known = known || key == keyword;
    if (!known) return false;
  }
  return true;
}

// A string property's value: any raw text, or one of its enum or const values.
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

}  // namespace

std::string dsml_arguments_rules(const Json& schema, const std::string& rule_prefix) {
  if (!schema.is_object() || schema.value("type", Json("object")) != "object") {
    fail_param("tools", "a tool's 'parameters' must be an object schema to be written as DSML parameters, got {}",
               schema.dump());
  }
  const Json properties = schema.value("properties", Json::object());
  const Json required = schema.value("required", Json::array());
  if (!properties.is_object() || !required.is_array()) {
    fail_param("tools", "a tool's 'parameters' has 'properties' that are not an object or 'required' not a list");
  }
  const std::string text_rule = rule_prefix + "text";
  std::string rules = raw_text_rule(text_rule);
  std::string root;
  size_t index = 0;
  for (const auto& [key, property] : properties.items()) {
    std::string value;
    const bool raw_text = is_raw_text(property);
    if (raw_text) {
      value = raw_text_value(property, text_rule);
    } else {
      // The property's own rules, with the $defs and definitions of the whole schema its $refs point into.
      Json value_schema = property;
      for (const char* defs : {"$defs", "definitions"}) {
        if (value_schema.is_object() && schema.contains(defs) && !value_schema.contains(defs)) {
          value_schema[defs] = schema[defs];
        }
      }
      const std::string value_prefix = fmt::format("{}p{}-", rule_prefix, index);
      rules += schema_rules(value_schema, value_prefix);
      value = value_prefix + "root";
    }
    const std::string open = fmt::format("{}{}\" string=\"{}\">", kParameterOpen, key, raw_text ? "true" : "false");
    const std::string parameter =
        ebnf_literal(open) + " " + value + " " + ebnf_literal(std::string(kParameterClose) + "\n");
    const bool is_required = std::find(required.begin(), required.end(), Json(key)) != required.end();
    root += is_required ? parameter + " " : "(" + parameter + ")? ";
    ++index;
  }
  return rules + rule_prefix + "root ::= " + (root.empty() ? "\"\"" : root) + "\n";
}

}  // namespace tern::server
