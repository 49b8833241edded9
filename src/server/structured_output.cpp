#include "server/structured_output.h"

#include <vector>

#include "core/error.h"
#include "core/nesting_limit.h"
#include "core/ordered_json_parser.h"
#include "grammar/json_schema_converter.h"
#include "server/api_error.h"

namespace tern::server {

namespace {

using grammar::GrammarKind;

// An EBNF "..." literal of arbitrary text.
std::string ebnf_literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

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
                                      chat::ToolCallFormat format) {
  const char* arguments_key = format == chat::ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
  Json calls = Json::array();
  for (const Json& tool : tools) {
    const Json& function = tool.at("function");
    const std::string name = function.at("name").get<std::string>();
    if (function_name && name != *function_name) continue;
    const auto parameters = function.find("parameters");
    Json arguments = parameters != function.end() ? *parameters : Json{{"type", "object"}};
    Json call = {{"type", "object"},
                 {"properties", {{"name", {{"const", name}}}, {arguments_key, std::move(arguments)}}},
                 {"required", {"name", arguments_key}},
                 {"additionalProperties", false}};
    calls.push_back(std::move(call));
  }
  if (calls.empty()) {
    fail_param("tool_choice", "'tool_choice' names the function '{}', which is not in 'tools'", function_name.value_or(""));
  }
  const Json schema = calls.size() == 1 ? calls[0] : Json{{"anyOf", std::move(calls)}};
  std::string call_ebnf;
  try {
    call_ebnf = grammar::json_schema_to_ebnf(std::string_view(schema.dump()));
  } catch (const Error& e) {
    fail_param("tools", "a tool's 'parameters' schema cannot be enforced: {}", e.what());
  }
  // The converter's root becomes the call rule of a grammar that wraps calls in the template's syntax.
  static constexpr std::string_view kConverterRoot = "root ::= ";
  static constexpr std::string_view kCallRule = "forced-tool-call";
  if (call_ebnf.rfind(kConverterRoot, 0) != 0 || call_ebnf.find(std::string(kCallRule) + " ::=") != std::string::npos) {
    fail("tool_choice: unexpected grammar from the schema converter");
  }
  std::string source = std::string(kCallRule) + " ::= " + call_ebnf.substr(kConverterRoot.size());
  if (format == chat::ToolCallFormat::kHermes) {
    const std::string tagged = "\"<tool_call>\\n\" " + std::string(kCallRule) + " \"\\n</tool_call>\"";
    source += function_name ? "root ::= " + tagged + "\n" : "root ::= " + tagged + " (\"\\n\" " + tagged + ")*\n";
  } else if (format == chat::ToolCallFormat::kLlama3Json) {
    source += "root ::= " + std::string(kCallRule) + "\n";
  } else {
    fail_param("tool_choice", "'tool_choice' forces a tool call, but this model's chat template has no tool-call syntax");
  }
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
