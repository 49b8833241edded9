#include "server/tagged_arguments_grammar.h"

#include <fmt/format.h>

#include <string_view>

#include "chat/tool_call_parser.h"
#include "server/api_error.h"
#include "server/ebnf_rules.h"
#include "server/parameter_value_rules.h"

namespace tern::server {

namespace {

// The parsers end a function or parameter name at its first '<' or '>' (or newline) and trim the whitespace around it.
void check_name(const std::string& name, std::string_view what) {
  if (name.empty() || name.find_first_of("<>\n") != std::string::npos || chat::trim_json_space(name) != name) {
    fail_param("tools",
               "the tool {} name {} cannot be written in this tool-call format: it must not be empty, hold '<', '>' "
               "or a newline, or start or end with whitespace",
               what, Json(name).dump());
  }
}

}  // namespace

std::string tagged_arguments_rules(const std::string& name, const Json& schema,
                                   const chat::TaggedParameterSyntax& syntax, const std::string& rule_prefix) {
  check_name(name, "function");
  const ObjectParameters parameters = object_parameters(schema, "tagged parameters");
  const std::string text_rule = rule_prefix + "text";
  const std::string_view end_tags[] = {syntax.value_end_tag, syntax.block_end_tag};
  std::string rules = raw_text_rule(text_rule, end_tags);
  std::string root;
  size_t index = 0;
  for (const auto& [key, property] : parameters.properties.items()) {
    check_name(key, "parameter");
    std::string value;
    if (property.is_object() && property.value("type", Json()) == "string") {
      if (!raw_text_follows(property)) {
        fail_param("tools",
                   "the string tool parameter '{}' cannot be enforced in this tool-call format, which writes "
                   "strings as bare text: only 'enum' and 'const' can constrain it, got {}",
                   key, property.dump());
      }
      value = raw_text_value(property, text_rule);
    } else {
      const std::string value_prefix = fmt::format("{}p{}-", rule_prefix, index);
      rules += json_value_rules(schema, property, value_prefix);
      value = value_prefix + "root";
    }
    const std::string parameter = ebnf_literal(std::string(syntax.key_prefix) + key + std::string(syntax.key_suffix)) +
                                  " " + value + " " + ebnf_literal(syntax.value_suffix);
    root += parameters.is_required(key) ? parameter + " " : "(" + parameter + ")? ";
    ++index;
  }
  return rules + rule_prefix + "root ::= " + (root.empty() ? "\"\"" : root) + "\n";
}

}  // namespace tern::server
