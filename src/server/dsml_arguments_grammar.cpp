#include "server/dsml_arguments_grammar.h"

#include <fmt/format.h>

#include <string_view>

#include "server/ebnf_rules.h"
#include "server/parameter_value_rules.h"

namespace tern::server {

namespace {

constexpr std::string_view kParameterOpen = "<｜DSML｜parameter name=\"";
constexpr std::string_view kParameterClose = "</｜DSML｜parameter>";

}  // namespace

std::string dsml_arguments_rules(const Json& schema, const std::string& rule_prefix) {
  const ObjectParameters parameters = object_parameters(schema, "DSML parameters");
  const std::string text_rule = rule_prefix + "text";
  std::string rules = raw_text_rule(text_rule, std::span(&kParameterClose, 1));
  std::string root;
  size_t index = 0;
  for (const auto& [key, property] : parameters.properties.items()) {
    std::string value;
    const bool raw_text = raw_text_follows(property);
    if (raw_text) {
      value = raw_text_value(property, text_rule);
    } else {
      const std::string value_prefix = fmt::format("{}p{}-", rule_prefix, index);
      rules += json_value_rules(schema, property, value_prefix);
      value = value_prefix + "root";
    }
    const std::string open = fmt::format("{}{}\" string=\"{}\">", kParameterOpen, key, raw_text ? "true" : "false");
    const std::string parameter =
        ebnf_literal(open) + " " + value + " " + ebnf_literal(std::string(kParameterClose) + "\n");
    root += parameters.is_required(key) ? parameter + " " : "(" + parameter + ")? ";
    ++index;
  }
  return rules + rule_prefix + "root ::= " + (root.empty() ? "\"\"" : root) + "\n";
}

}  // namespace tern::server
