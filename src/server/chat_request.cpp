#include "server/chat_request.h"

#include <algorithm>

#include "core/nesting_limit.h"
#include "core/ordered_json_parser.h"
#include "server/api_error.h"

namespace tern::server {

namespace {

constexpr int64_t kMaxTopLogprobs = 20;

// OpenAI content may be a list of parts; templates expect text, so text parts are joined as vLLM joins them.
Json normalize_content(const Json& content, const std::string& param) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) {
    fail_param(param, "'{}' must be a string, a list of content parts or null, got {}", param, json_type_name(content));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    RequestFields part(content[i], fmt::format("{}[{}].", param, i));
    const auto type = part.string("type");
    if (type != "text") {
      fail_param(part.param("type"), "'{}' is '{}'; only text content parts are supported", part.param("type"),
                 type.value_or("null"));
    }
    const auto part_text = part.string("text");
    if (!part_text) fail_param(part.param("text"), "'{}' is required", part.param("text"));
    if (i > 0) text += "\n";
    text += *part_text;
  }
  return text;
}

// Tool-call arguments arrive as JSON text; templates render them as objects (vLLM parses them the same way).
Json normalize_tool_calls(const Json& tool_calls, const std::string& param) {
  if (!tool_calls.is_array()) fail_param(param, "'{}' must be a list, got {}", param, json_type_name(tool_calls));
  Json result = tool_calls;
  for (size_t i = 0; i < result.size(); ++i) {
    const std::string call_param = fmt::format("{}[{}]", param, i);
    RequestFields call(result[i], call_param + ".");
    const Json* function = call.find("function");
    if (!function) fail_param(call.param("function"), "'{}' is required", call.param("function"));
    RequestFields function_fields(*function, call.param("function."));
    if (!function_fields.string("name")) fail_param(function_fields.param("name"), "'{}' is required", function_fields.param("name"));
    Json& arguments = result[i]["function"]["arguments"];
    if (arguments.is_string()) {
      if (!json_nesting_within_limit(arguments.get_ref<const std::string&>())) {
        const std::string arguments_param = function_fields.param("arguments");
        fail_param(arguments_param, "'{}': the arguments' JSON text has {}", arguments_param, nesting_limit_message());
      }
      Json parsed = parse_ordered_json(arguments.get<std::string>(), /*allow_exceptions=*/false);
      if (parsed.is_object()) arguments = std::move(parsed);
    }
  }
  return result;
}

Json parse_messages(const RequestFields& fields) {
  const Json* messages = fields.find("messages");
  if (!messages) fail_param("messages", "'messages' is required");
  if (!messages->is_array()) fail_param("messages", "'messages' must be a list, got {}", json_type_name(*messages));
  if (messages->empty()) fail_param("messages", "'messages' must not be empty");
  Json result = Json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string param = fmt::format("messages[{}]", i);
    RequestFields message(messages->at(i), param + ".");
    const auto role = message.string("role");
    if (!role) fail_param(message.param("role"), "'{}' is required", message.param("role"));
    if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant" && *role != "tool") {
      fail_param(message.param("role"), "'{}' is '{}'; expected system, developer, user, assistant or tool",
                 message.param("role"), *role);
    }
    Json normalized = messages->at(i);
    const auto content = normalized.find("content");
    if (content != normalized.end()) *content = normalize_content(*content, message.param("content"));
    if (const Json* tool_calls = message.find("tool_calls")) {
      normalized["tool_calls"] = normalize_tool_calls(*tool_calls, message.param("tool_calls"));
    }
    result.push_back(std::move(normalized));
  }
  return result;
}

Json parse_tools(const RequestFields& fields) {
  const Json* tools = fields.find("tools");
  if (!tools) return nullptr;
  if (!tools->is_array()) fail_param("tools", "'tools' must be a list, got {}", json_type_name(*tools));
  for (size_t i = 0; i < tools->size(); ++i) {
    RequestFields tool(tools->at(i), fmt::format("tools[{}].", i));
    if (tool.string("type").value_or("function") != "function") {
      fail_param(tool.param("type"), "'{}' must be \"function\"", tool.param("type"));
    }
    const Json* function = tool.find("function");
    if (!function) fail_param(tool.param("function"), "'{}' is required", tool.param("function"));
    RequestFields function_fields(*function, tool.param("function."));
    if (!function_fields.string("name")) fail_param(function_fields.param("name"), "'{}' is required", function_fields.param("name"));
    if (const Json* parameters = function_fields.find("parameters"); parameters && !parameters->is_object()) {
      fail_param(function_fields.param("parameters"), "'{}' must be a JSON schema object", function_fields.param("parameters"));
    }
  }
  return tools->empty() ? Json(nullptr) : *tools;
}

struct ToolChoice {
  bool parse_tool_calls = false;  // the model's tool calls are parsed out of its text
  bool force = false;             // the output must be tool calls ("required" or a named function)
  std::optional<std::string> function;
};

ToolChoice parse_tool_choice(const RequestFields& fields, const Json& tools) {
  const bool has_tools = !tools.is_null();
  const Json* choice = fields.find("tool_choice");
  if (!choice) return {has_tools};
  if (choice->is_string()) {
    const auto value = choice->get<std::string>();
    if (value == "none") return {};
    if (value == "auto") return {has_tools};
    if (value == "required") {
      if (!has_tools) fail_param("tool_choice", "'tool_choice' \"required\" needs 'tools'");
      return {true, true, std::nullopt};
    }
    fail_param("tool_choice", "'tool_choice' is '{}'; expected none, auto, required or a function", value);
  }
  if (choice->is_object()) {
    RequestFields choice_fields(*choice, "tool_choice.");
    if (choice_fields.string("type").value_or("function") != "function") {
      fail_param("tool_choice.type", "'tool_choice.type' must be \"function\"");
    }
    const Json* function = choice_fields.find("function");
    if (!function) fail_param("tool_choice.function", "'tool_choice.function' is required");
    RequestFields function_fields(*function, "tool_choice.function.");
    const auto name = function_fields.string("name");
    if (!name) fail_param("tool_choice.function.name", "'tool_choice.function.name' is required");
    if (!has_tools) fail_param("tool_choice", "'tool_choice' names the function '{}', but no 'tools' were given", *name);
    const bool known = std::any_of(tools.begin(), tools.end(), [&](const Json& tool) {
      return tool.at("function").at("name").get<std::string>() == *name;
    });
    if (!known) fail_param("tool_choice.function.name", "'tool_choice' names the function '{}', which is not in 'tools'", *name);
    return {true, true, *name};
  }
  fail_param("tool_choice", "'tool_choice' must be a string or an object, got {}", json_type_name(*choice));
}

}  // namespace

ChatRequest ChatRequest::parse(const Json& body) {
  RequestFields fields(body);
  ChatRequest request;
  request.options = parse_generation_options(fields, Endpoint::kChatCompletions);
  request.messages = parse_messages(fields);
  request.tools = parse_tools(fields);
  const ToolChoice tool_choice = parse_tool_choice(fields, request.tools);
  request.parse_tool_calls = tool_choice.parse_tool_calls;
  request.force_tool_call = tool_choice.force;
  request.forced_function = tool_choice.function;
  request.constraint = parse_output_constraint(fields);
  if (const Json* response_format = fields.find("response_format")) request.response_format = *response_format;
  if (request.force_tool_call && request.constraint) {
    fail_param(request.constraint->param, "'tool_choice' forcing a tool call cannot be combined with '{}'",
               request.constraint->param);
  }
  const bool logprobs = fields.boolean("logprobs").value_or(false);
  const auto top_logprobs = fields.integer("top_logprobs", 0, kMaxTopLogprobs);
  if (top_logprobs && !logprobs) fail_param("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
  if (logprobs) request.top_logprobs = static_cast<int32_t>(top_logprobs.value_or(0));
  request.options.sampling.logprobs = request.top_logprobs;
  request.add_generation_prompt = fields.boolean("add_generation_prompt").value_or(true);
  if (const Json* kwargs = fields.find("chat_template_kwargs")) {
    if (!kwargs->is_object()) {
      fail_param("chat_template_kwargs", "'chat_template_kwargs' must be an object, got {}", json_type_name(*kwargs));
    }
    request.template_kwargs = *kwargs;
  }
  return request;
}

chat::ChatTemplateInput ChatRequest::template_input() const {
  chat::ChatTemplateInput input;
  input.messages = messages;
  input.tools = tools;
  input.add_generation_prompt = add_generation_prompt;
  input.extra_kwargs = template_kwargs;
  input.response_format = response_format;
  return input;
}

}  // namespace tern::server
