#include "server/structured_output.h"

#include <vector>

#include "chat/output_parser_registry.h"
#include "core/error.h"
#include "core/nesting_limit.h"
#include "core/ordered_json_parser.h"
#include "server/api_error.h"
#include "server/dsml_arguments_grammar.h"
#include "server/ebnf_rules.h"
#include "server/pythonic_arguments_grammar.h"
#include "server/tagged_arguments_grammar.h"

namespace tern::server {

namespace {

using grammar::GrammarKind;

// A JSON Schema given as an object or as JSON text (vLLM takes both).
std::string schema_source(const Json& schema, const std::string& param) {
  if (schema.is_object()) return schema.dump();
  if (schema.is_string()) {
    if (!json_nesting_within_limit(schema.get_ref<const std::string&>())) {
      fail_param(param, "'{}': the schema's JSON text has {}", param, nesting_limit_message());
    }
    const Json parsed = parse_ordered_json(schema.get<std::string>(), /*allow_exceptions=*/false);
    if (!parsed.is_object()) fail_param(param, "'{}' must be a JSON schema object (or its JSON text)", param);
    return parsed.dump();
  }
  fail_param(param, "'{}' must be a JSON schema object, got {}", param, json_type_name(schema));
}

std::string text_source(const Json& value, const std::string& param, const char* what) {
  if (!value.is_string()) fail_param(param, "'{}' must be {} string, got {}", param, what, json_type_name(value));
  if (value.get_ref<const std::string&>().empty()) fail_param(param, "'{}' must not be empty", param);
  return value.get<std::string>();
}

OutputConstraint choice_constraint(const Json& choices, const std::string& param) {
  if (!choices.is_array() || choices.empty()) fail_param(param, "'{}' must be a non-empty list of strings", param);
  std::string body;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (!choices[i].is_string()) {
      fail_param(param, "'{}[{}]' must be a string, got {}", param, i, json_type_name(choices[i]));
    }
    if (choices[i].get_ref<const std::string&>().empty()) fail_param(param, "'{}[{}]' must not be empty", param, i);
    body += (i ? " | " : "") + ebnf_literal(choices[i].get<std::string>());
  }
  return {GrammarKind::kEbnf, "root ::= " + body + "\n", param};
}

std::optional<OutputConstraint> response_format_constraint(const Json& format) {
  RequestFields fields(format, "response_format.");
  const auto type = fields.string("type");
  if (!type) fail_param("response_format.type", "'response_format.type' is required");
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") return OutputConstraint{GrammarKind::kJsonObject, "", "response_format"};
  if (*type != "json_schema") {
    fail_param("response_format.type", "'response_format.type' is '{}'; expected text, json_object or json_schema",
               *type);
  }
  const Json* json_schema = fields.find("json_schema");
  if (!json_schema) fail_param("response_format.json_schema", "'response_format.json_schema' is required");
  RequestFields schema_fields(*json_schema, "response_format.json_schema.");
  schema_fields.string("name");     // OpenAI requires it; only its type is checked here
  schema_fields.boolean("strict");  // the output always follows the schema, strict or not
  const std::string param = "response_format.json_schema.schema";
  const Json* schema = schema_fields.find("schema");
  // OpenAI's default for a missing schema: any JSON object.
  if (!schema) return OutputConstraint{GrammarKind::kJsonObject, "", param};
  return OutputConstraint{GrammarKind::kJsonSchema, schema_source(*schema, param), param};
}

void add_structured_outputs(const Json& value, std::vector<OutputConstraint>& found) {
  RequestFields fields(value, "structured_outputs.");
  if (const Json* json = fields.find("json")) {
    found.push_back({GrammarKind::kJsonSchema, schema_source(*json, "structured_outputs.json"), "structured_outputs.json"});
  }
  if (const Json* regex = fields.find("regex")) {
    found.push_back({GrammarKind::kRegex, text_source(*regex, "structured_outputs.regex", "a regular expression"),
                     "structured_outputs.regex"});
  }
  if (const Json* grammar = fields.find("grammar")) {
    found.push_back({GrammarKind::kEbnf, text_source(*grammar, "structured_outputs.grammar", "an EBNF grammar"),
                     "structured_outputs.grammar"});
  }
  if (const Json* choice = fields.find("choice")) found.push_back(choice_constraint(*choice, "structured_outputs.choice"));
  if (fields.boolean("json_object").value_or(false)) {
    found.push_back({GrammarKind::kJsonObject, "", "structured_outputs.json_object"});
  }
}

// The tool-call parsers whose calls forced tool choice can write.
std::string forceable_parser_names() {
  std::string names;
  for (const auto& entry : chat::tool_call_parsers()) {
    if (entry.forced_syntax) names += (names.empty() ? "" : ", ") + std::string(entry.name);
  }
  return names;
}

}  // namespace

std::optional<OutputConstraint> parse_output_constraint(const RequestFields& fields) {
  std::vector<OutputConstraint> found;
  if (const Json* format = fields.find("response_format")) {
    if (auto constraint = response_format_constraint(*format)) found.push_back(std::move(*constraint));
  }
  if (const Json* json = fields.find("guided_json")) {
    found.push_back({GrammarKind::kJsonSchema, schema_source(*json, "guided_json"), "guided_json"});
  }
  if (const Json* regex = fields.find("guided_regex")) {
    found.push_back({GrammarKind::kRegex, text_source(*regex, "guided_regex", "a regular expression"), "guided_regex"});
  }
  if (const Json* grammar = fields.find("guided_grammar")) {
    found.push_back({GrammarKind::kEbnf, text_source(*grammar, "guided_grammar", "an EBNF grammar"), "guided_grammar"});
  }
  if (const Json* choice = fields.find("guided_choice")) found.push_back(choice_constraint(*choice, "guided_choice"));
  if (const Json* structured = fields.find("structured_outputs")) add_structured_outputs(*structured, found);
  if (found.size() > 1) {
    fail_param(found[1].param, "only one structured-output constraint is allowed per request, got '{}' and '{}'",
               found[0].param, found[1].param);
  }
  if (found.empty()) return std::nullopt;
  return std::move(found.front());
}

OutputConstraint tool_call_constraint(const Json& tools, const std::optional<std::string>& function_name,
                                      std::string_view tool_call_parser) {
  const chat::ToolCallParserEntry* parser = chat::find_tool_call_parser(tool_call_parser);
  if (!parser || !parser->forced_syntax) {
    fail_param("tool_choice",
               "'tool_choice' forces a tool call, but {} cannot be forced: forced calls are written in the syntax of "
               "the tool-call parsers {}",
               parser ? fmt::format("the '{}' tool-call format", parser->name)
                      : std::string("this model's chat template has no tool-call syntax, so a call"),
               forceable_parser_names());
  }
  const chat::ForcedToolCallSyntax& syntax = *parser->forced_syntax;
  std::string source;
  std::vector<std::string> call_rules;
  for (const Json& tool : tools) {
    const Json& function = tool.at("function");
    const std::string name = function.at("name").get<std::string>();
    if (function_name && name != *function_name) continue;
    const auto parameters = function.find("parameters");
    Json arguments = parameters != function.end() ? *parameters : Json{{"type", "object"}};
    const std::string rule_prefix = fmt::format("tool{}-", call_rules.size());
    std::string call;
    if (syntax.arguments_key.empty()) {
      switch (syntax.arguments) {
        case chat::ForcedArguments::kJsonObject:
          source += schema_rules(arguments, rule_prefix);
          break;
        case chat::ForcedArguments::kDsmlParameters:
          source += dsml_arguments_rules(arguments, rule_prefix);
          break;
        case chat::ForcedArguments::kTaggedParameters:
          source += tagged_arguments_rules(name, arguments, *syntax.parameters, rule_prefix);
          break;
        case chat::ForcedArguments::kPythonKeywords:
          source += pythonic_arguments_rules(name, arguments, rule_prefix);
          break;
      }
      call =
          literal_item(std::string(syntax.call_prefix) + name + std::string(syntax.name_suffix)) + rule_prefix + "root";
    } else {
      const std::string key(syntax.arguments_key);
      Json call_schema = {{"type", "object"},
                          {"properties", {{"name", {{"const", name}}}, {key, std::move(arguments)}}},
                          {"required", {"name", key}},
                          {"additionalProperties", false}};
      source += schema_rules(call_schema, rule_prefix);
      call = literal_item(syntax.call_prefix) + rule_prefix + "root";
    }
    call_rules.push_back(call + " " + literal_item(syntax.call_suffix));
  }
  if (call_rules.empty()) {
    fail_param("tool_choice", "'tool_choice' names the function '{}', which is not in 'tools'", function_name.value_or(""));
  }
  std::string any_call;
  for (const auto& rule : call_rules) any_call += (any_call.empty() ? "" : " | ") + std::string("(") + rule + ")";
  source += "forced-tool-call ::= " + any_call + "\n";
  const std::string calls = function_name || syntax.single_call
                                ? "forced-tool-call "
                                : "forced-tool-call (" + literal_item(syntax.separator) + "forced-tool-call)* ";
  source += "root ::= " + literal_item(syntax.section_prefix) + calls + literal_item(syntax.section_suffix) + "\n";
  return {GrammarKind::kEbnf, std::move(source), "tools"};
}

std::shared_ptr<const grammar::CompiledGrammar> compile_constraint(grammar::GrammarCache& cache,
                                                                   const OutputConstraint& constraint) {
  try {
    return cache.get(constraint.kind, constraint.source);
  } catch (const Error& e) {
    fail_param(constraint.param, "invalid {} in '{}': {}", grammar::grammar_kind_name(constraint.kind),
               constraint.param, e.what());
  }
}

}  // namespace tern::server
