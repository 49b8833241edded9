#include "server/pythonic_arguments_grammar.h"

#include <fmt/format.h>

#include <regex>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/ebnf_rules.h"
#include "server/parameter_value_rules.h"

namespace tern::server {

namespace {

// Python literals as the pythonic parser reads them: double-quoted strings with the escapes it decodes, numbers
// stoll/stod read without overflow, and lists and dicts of them.
constexpr std::string_view kLiteralRules =
    "{p}string ::= \"\\\"\" ([^\"\\\\\\x00-\\x1f\\x7f] | \"\\\\\" [\"\\\\ntr])* \"\\\"\"\n"
    "{p}integer ::= \"-\"? (\"0\" | [1-9] [0-9]{{0,14}})\n"
    "{p}number ::= {p}integer (\".\" [0-9]{{1,15}})? ([eE] [-+]? [0-9]{{1,2}})?\n"
    "{p}boolean ::= \"True\" | \"False\"\n"
    "{p}null ::= \"None\"\n"
    "{p}list ::= \"[\" ({p}any (\", \" {p}any)*)? \"]\"\n"
    "{p}dict ::= \"{{\" ({p}string \": \" {p}any (\", \" {p}string \": \" {p}any)*)? \"}}\"\n"
    "{p}any ::= {p}string | {p}number | {p}boolean | {p}null | {p}list | {p}dict\n";

void check_identifier(const std::string& name, std::string_view what) {
  static const std::regex kIdentifier("[A-Za-z_][A-Za-z0-9_]*");
  if (!std::regex_match(name, kIdentifier)) {
    fail_param("tools", "the tool {} name {} cannot be written as a pythonic call: it must be a Python identifier",
               what, Json(name).dump());
  }
}

std::string python_string_literal(const std::string& text) {
  std::string literal = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': literal += "\\\""; break;
      case '\\': literal += "\\\\"; break;
      case '\n': literal += "\\n"; break;
      case '\t': literal += "\\t"; break;
      case '\r': literal += "\\r"; break;
      default:
        literal += c < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", c) : std::string(1, static_cast<char>(c));
    }
  }
  return literal + "\"";
}

std::string type_rule(const Json& type, const std::string& prefix) {
  static const std::string_view kTypes[] = {"string", "integer", "number", "boolean", "null"};
  if (type == "array") return prefix + "list";
  if (type == "object") return prefix + "dict";
  for (std::string_view known : kTypes) {
    if (type == known) return prefix + std::string(known);
  }
  return prefix + "any";
}

std::string value_rule(const Json& property, const std::string& prefix) {
  if (!property.is_object()) return prefix + "any";
  if (property.contains("const") || property.contains("enum")) {
    bool all_strings =
        property.value("const", Json("")).is_string() && property.value("enum", Json::array()).is_array();
    for (const Json& value : property.value("enum", Json::array())) all_strings = all_strings && value.is_string();
    if (!all_strings) return prefix + "any";
    std::vector<Json> values;
    if (property.contains("const")) values.push_back(property["const"]);
    for (const Json& value : property.value("enum", Json::array())) values.push_back(value);
    std::string alternatives;
    for (const Json& value : values) {
      alternatives +=
          (alternatives.empty() ? "" : " | ") + ebnf_literal(python_string_literal(value.get<std::string>()));
    }
    return "(" + alternatives + ")";
  }
  const Json type = property.value("type", Json());
  if (!type.is_array()) return type_rule(type, prefix);
  std::string alternatives;
  for (const Json& one : type) alternatives += (alternatives.empty() ? "" : " | ") + type_rule(one, prefix);
  return alternatives.empty() ? prefix + "any" : "(" + alternatives + ")";
}

}  // namespace

std::string pythonic_arguments_rules(const std::string& name, const Json& schema, const std::string& rule_prefix) {
  check_identifier(name, "function");
  const ObjectParameters parameters = object_parameters(schema, "Python keyword arguments");
  std::vector<std::string> arguments;
  std::vector<bool> required;
  for (const auto& [key, property] : parameters.properties.items()) {
    check_identifier(key, "parameter");
    arguments.push_back(ebnf_literal(key + "=") + " " + value_rule(property, rule_prefix));
    required.push_back(parameters.is_required(key));
  }
  // One alternative per argument that can come first (those before it are all optional), the rest after commas.
  std::string alternatives;
  bool all_optional = true;
  for (size_t first = 0; first < arguments.size() && all_optional; ++first) {
    std::string alternative = arguments[first];
    for (size_t next = first + 1; next < arguments.size(); ++next) {
      const std::string item = "\", \" " + arguments[next];
      alternative += required[next] ? " " + item : " (" + item + ")?";
    }
    alternatives += (alternatives.empty() ? "" : " | ") + std::string("(") + alternative + ")";
    all_optional = !required[first];
  }
  std::string root = alternatives.empty() ? "\"\"" : all_optional ? "(" + alternatives + ")?" : alternatives;
  return fmt::format(fmt::runtime(kLiteralRules), fmt::arg("p", rule_prefix)) + rule_prefix + "root ::= " + root + "\n";
}

}  // namespace tern::server
