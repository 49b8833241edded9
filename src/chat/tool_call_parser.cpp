#include "chat/tool_call_parser.h"

#include "chat/value.h"
#include "core/nesting_limit.h"
#include "core/ordered_json_parser.h"

namespace tern::chat {

bool is_json_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim_json_space(std::string_view text) {
  while (!text.empty() && is_json_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_json_space(text.back())) text.remove_suffix(1);
  return text;
}

size_t complete_json_value_len(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return 0;
}

std::string arguments_text(const nlohmann::ordered_json& object) { return Value::from_json(object).to_json_text(); }

bool arguments_from_json_text(std::string_view json_text, std::string& arguments) {
  // JSON nested deeper than Value::from_json converts is not a tool call (the text stays content).
  if (!json_nesting_within_limit(json_text)) return false;
  auto json = parse_ordered_json(json_text, /*allow_exceptions=*/false);
  if (!json.is_object()) return false;
  arguments = arguments_text(json);
  return true;
}

bool parse_tool_call_json(std::string_view json_text, ParsedToolCall& call) {
  if (!json_nesting_within_limit(json_text)) return false;
  auto json = parse_ordered_json(json_text, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("name") || !json["name"].is_string()) return false;
  const char* arguments_key = json.contains("arguments") ? "arguments" : "parameters";
  nlohmann::ordered_json arguments = json.contains(arguments_key) ? json[arguments_key] : nlohmann::ordered_json::object();
  std::string arguments_json;
  if (arguments.is_string()) {
    // Some models write the arguments as JSON text inside a string; it must still be an object.
    if (!arguments_from_json_text(arguments.get_ref<const std::string&>(), arguments_json)) return false;
  } else if (arguments.is_object()) {
    arguments_json = arguments_text(arguments);
  } else {
    return false;
  }
  call.name = json["name"].get<std::string>();
  call.arguments = std::move(arguments_json);
  return true;
}

nlohmann::ordered_json parameter_value(std::string_view text) {
  if (json_nesting_within_limit(text)) {
    auto json = parse_ordered_json(text, /*allow_exceptions=*/false);
    if (!json.is_discarded()) return json;
  }
  return std::string(text);
}

ToolParameterSchemas tool_parameter_schemas(const nlohmann::ordered_json& tools) {
  ToolParameterSchemas schemas;
  if (!tools.is_array()) return schemas;
  for (const auto& tool : tools) {
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) continue;
    const auto& function = tool["function"];
    if (!function.contains("name") || !function["name"].is_string()) continue;
    schemas[function["name"].get<std::string>()] = function.value("parameters", nlohmann::ordered_json::object());
  }
  return schemas;
}

nlohmann::ordered_json parameter_value(std::string_view text, const ToolParameterSchemas& tools,
                                       std::string_view function, std::string_view key) {
  const auto tool = tools.find(function);
  if (tool != tools.end() && tool->second.is_object()) {
    const auto properties = tool->second.find("properties");
    if (properties != tool->second.end() && properties->is_object()) {
      const auto property = properties->find(std::string(key));
      if (property != properties->end() && property->is_object() &&
          property->value("type", nlohmann::ordered_json()) == "string") {
        return std::string(text);
      }
    }
  }
  return parameter_value(text);
}

}  // namespace tern::chat
