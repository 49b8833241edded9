#include "chat/deepseek_encoder.h"

#include <algorithm>
#include <fstream>
#include <map>

#include "chat/chat_template.h"
#include "chat/value.h"
#include "core/error.h"
#include "core/ordered_json_parser.h"

namespace tern::chat {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kDsml = "｜DSML｜";

constexpr std::string_view kResponseFormatIntro =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

constexpr std::string_view kV4ReasoningEffortMax =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

// The tools sections, with ｜DSML｜ and the thinking tags written out; "{tool_schemas}" is one JSON line per tool.
constexpr std::string_view kV32ToolsTemplate = R"(## Tools

You have access to a set of tools you can use to answer the user's question.
You can invoke functions by writing a "<｜DSML｜function_calls>" block like the following as part of your reply to the user:
<｜DSML｜function_calls>
<｜DSML｜invoke name="$FUNCTION_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$FUNCTION_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜function_calls>

String and scalar parameters should be specified as is without any escaping or quotes, while lists and objects should use JSON format. The "string" attribute should be set to "true" for string type parameters and "false" for other types (numbers, booleans, arrays, objects).

If the thinking_mode is enabled, then after function results you should strongly consider outputting a thinking block. Here is an example:

<｜DSML｜function_calls>
...
</｜DSML｜function_calls>

<function_results>
...
</function_results>

<think>...thinking about results</think>

Here are the functions available in JSONSchema format:
<functions>
{tool_schemas}
</functions>
)";

constexpr std::string_view kV4ToolsTemplate = R"(## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<｜DSML｜tool_calls>" block like the following:

<｜DSML｜tool_calls>
<｜DSML｜invoke name="$TOOL_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$TOOL_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.

Otherwise, output directly after </think> with tool calls or final response.

### Available Tool Schemas

{tool_schemas}

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
)";

// Python's json.dumps(value, ensure_ascii=False), the reference's to_json.
std::string to_json(const Json& value) { return Value::from_json(value).to_json_text(); }

// Python's truth value of a JSON value, as the reference tests its fields.
bool truthy(const Json* value) {
  if (!value || value->is_null()) return false;
  if (value->is_boolean()) return value->get<bool>();
  if (value->is_number_integer()) return value->get<int64_t>() != 0;
  if (value->is_number()) return value->get<double>() != 0.0;
  if (value->is_string()) return !value->get_ref<const std::string&>().empty();
  return !value->empty();
}

const Json* field(const Json& message, const char* key) {
  if (!message.is_object()) return nullptr;
  auto it = message.find(key);
  return it == message.end() ? nullptr : &*it;
}

std::string role_of(const Json& message) {
  const Json* role = field(message, "role");
  return role && role->is_string() ? role->get<std::string>() : "";
}

// Python's str() of a message's text field, as str.format renders it: None prints as "None".
std::string text_of(const Json* value, std::string_view what) {
  if (!value || value->is_null()) return "None";
  if (!value->is_string()) fail("{} must be a string, got {}", what, value->type_name());
  return value->get<std::string>();
}

// `content or ""`.
std::string text_or_empty(const Json* value, std::string_view what) {
  return truthy(value) ? text_of(value, what) : "";
}

// The reasoning of an earlier assistant turn; vLLM's own messages name it "reasoning".
const Json* reasoning_of(const Json& message) {
  if (const Json* reasoning = field(message, "reasoning_content")) return reasoning;
  return field(message, "reasoning");
}

int find_last_user_index(const Json& messages) {
  for (int i = static_cast<int>(messages.size()) - 1; i >= 0; --i) {
    const std::string role = role_of(messages[static_cast<size_t>(i)]);
    if (role == "user" || role == "developer") return i;
  }
  return -1;
}

std::string render_tools(DeepSeekEncoding encoding, const Json& tools, size_t index) {
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json* function = field(tools[i], "function");
    if (!function) fail("messages[{}].tools[{}]: missing \"function\"", index, i);
    if (i > 0) schemas += "\n";
    schemas += to_json(*function);
  }
  std::string text(encoding == DeepSeekEncoding::kV32 ? kV32ToolsTemplate : kV4ToolsTemplate);
  text.replace(text.find("{tool_schemas}"), std::string_view("{tool_schemas}").size(), schemas);
  return text;
}

// "\n\n" + tools section + "\n\n" + response format section, each where the message carries one.
std::string render_system_sections(DeepSeekEncoding encoding, const Json& message, size_t index) {
  std::string text;
  const Json* tools = field(message, "tools");
  if (truthy(tools)) {
    if (!tools->is_array()) fail("messages[{}].tools must be a list", index);
    text += "\n\n" + render_tools(encoding, *tools, index);
  }
  const Json* response_format = field(message, "response_format");
  if (truthy(response_format)) text += "\n\n" + std::string(kResponseFormatIntro) + to_json(*response_format);
  return text;
}

// One call's arguments as DSML parameters: strings as they are (string="true"), anything else as JSON.
// V4 renders arguments that are not JSON text as one string parameter named "arguments"; V3.2 refuses them.
std::string encode_arguments_to_dsml(DeepSeekEncoding encoding, const Json& arguments, const std::string& where) {
  Json object;
  if (arguments.is_string()) {
    object = parse_ordered_json(arguments.get<std::string>(), /*allow_exceptions=*/false);
    if (object.is_discarded()) {
      if (encoding == DeepSeekEncoding::kV32) fail("{}.arguments is not JSON", where);
      object = Json{{"arguments", arguments}};
    }
  } else {
    object = arguments;
  }
  if (!object.is_object()) fail("{}.arguments must be a JSON object", where);
  std::string text;
  bool first = true;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (!first) text += "\n";
    first = false;
    const bool is_string = it.value().is_string();
    text += fmt::format("<{0}parameter name=\"{1}\" string=\"{2}\">{3}</{0}parameter>", kDsml, it.key(),
                        is_string ? "true" : "false", is_string ? it.value().get<std::string>() : to_json(it.value()));
  }
  return text;
}

// "\n\n<｜DSML｜BLOCK>\n<｜DSML｜invoke name=...>...</｜DSML｜invoke>...\n</｜DSML｜BLOCK>", or "" without calls.
std::string render_tool_calls(DeepSeekEncoding encoding, const Json& message, size_t index) {
  const Json* tool_calls = field(message, "tool_calls");
  if (!truthy(tool_calls)) return "";
  if (!tool_calls->is_array()) fail("messages[{}].tool_calls must be a list", index);
  std::string invokes;
  for (size_t i = 0; i < tool_calls->size(); ++i) {
    const std::string where = fmt::format("messages[{}].tool_calls[{}].function", index, i);
    const Json* function = field((*tool_calls)[i], "function");
    if (!function || !field(*function, "name") || !field(*function, "arguments")) {
      fail("{} needs a name and arguments", where);
    }
    if (i > 0) invokes += "\n";
    invokes += fmt::format("<{0}invoke name=\"{1}\">\n{2}\n</{0}invoke>", kDsml,
                           text_of(field(*function, "name"), where + ".name"),
                           encode_arguments_to_dsml(encoding, *field(*function, "arguments"), where));
  }
  const std::string_view block = encoding == DeepSeekEncoding::kV32 ? "function_calls" : "tool_calls";
  return fmt::format("\n\n<{0}{1}>\n{2}\n</{0}{1}>", kDsml, block, invokes);
}

size_t tool_call_count(const Json& message) {
  const Json* tool_calls = field(message, "tool_calls");
  return truthy(tool_calls) && tool_calls->is_array() ? tool_calls->size() : 0;
}

// ---- DeepSeek-V3.2 (encoding_dsv32.py) ----

std::string render_v32_message(size_t index, const Json& messages, bool thinking) {
  const Json& message = messages[index];
  const std::string role = role_of(message);
  const int last_user = find_last_user_index(messages);
  const bool at_last_user = static_cast<int>(index) == last_user;
  const std::string content_what = fmt::format("messages[{}].content", index);
  std::string prompt;
  if (role == "system") {
    prompt += text_or_empty(field(message, "content"), content_what);
    prompt += render_system_sections(DeepSeekEncoding::kV32, message, index);
  } else if (role == "developer") {
    if (!truthy(field(message, "content"))) fail("messages[{}]: a developer message needs content", index);
    prompt += kUser;
    prompt += render_system_sections(DeepSeekEncoding::kV32, message, index);
    prompt += "\n\n# The user's message is: " + text_of(field(message, "content"), content_what);
    prompt += kAssistant;
    prompt += at_last_user && thinking ? kThinkStart : kThinkEnd;
  } else if (role == "user") {
    prompt += kUser;
    prompt += text_of(field(message, "content"), content_what);
    prompt += kAssistant;
    prompt += at_last_user && thinking ? kThinkStart : kThinkEnd;
  } else if (role == "tool") {
    // The results follow their assistant turn in call order; the first opens <function_results>, the last closes it.
    size_t assistant_index = index;
    while (assistant_index > 0 && role_of(messages[assistant_index - 1]) == "tool") --assistant_index;
    if (assistant_index == 0 || role_of(messages[assistant_index - 1]) != "assistant") {
      fail("messages[{}]: a tool result must follow an assistant message with tool calls", index);
    }
    const size_t call_order = index - assistant_index + 1;
    const size_t num_calls = tool_call_count(messages[assistant_index - 1]);
    if (num_calls < call_order) fail("messages[{}]: more tool results than the assistant made tool calls", index);
    if (call_order == 1) prompt += "\n\n<function_results>";
    prompt += "\n<result>" + text_of(field(message, "content"), content_what) + "</result>";
    if (call_order == num_calls) {
      prompt += "\n</function_results>\n\n";
      prompt += static_cast<int>(index) >= last_user && thinking ? kThinkStart : kThinkEnd;
    }
  } else if (role == "assistant") {
    const std::string tool_calls = render_tool_calls(DeepSeekEncoding::kV32, message, index);
    if (thinking && static_cast<int>(index) > last_user) {
      if (!truthy(reasoning_of(message)) && tool_calls.empty()) {
        fail("messages[{}]: in thinking mode an assistant message after the last user message needs "
             "reasoning_content or tool_calls", index);
      }
      prompt += text_or_empty(reasoning_of(message), fmt::format("messages[{}].reasoning_content", index));
      prompt += kThinkEnd;
    }
    prompt += text_or_empty(field(message, "content"), content_what) + tool_calls;
    prompt += kEos;
  } else {
    fail("messages[{}]: unknown role '{}'", index, role);
  }
  return prompt;
}

std::string encode_v32(const Json& messages, const DeepSeekEncodeOptions& options) {
  Json full = messages;
  if (options.thinking && options.drop_thinking) {
    // The reasoning of turns before the last user message is dropped. Other roles there (developer) are dropped
    // too, which the reference's render loop, still counting the messages it was given, does not survive.
    const int last_user = find_last_user_index(messages);
    full = Json::array();
    for (size_t i = 0; i < messages.size(); ++i) {
      const std::string role = role_of(messages[i]);
      if (role == "user" || role == "system" || role == "tool" || static_cast<int>(i) >= last_user) {
        full.push_back(messages[i]);
      } else if (role == "assistant") {
        Json without_reasoning = messages[i];
        without_reasoning.erase("reasoning_content");
        full.push_back(std::move(without_reasoning));
      } else {
        fail("messages[{}]: a '{}' message before the last user message is dropped in thinking mode", i, role);
      }
    }
  }
  std::string prompt(kBos);
  for (size_t i = 0; i < full.size(); ++i) prompt += render_v32_message(i, full, options.thinking);
  return prompt;
}

// ---- DeepSeek-V4 (encoding_dsv4.py) ----

// Tool messages become <tool_result> blocks of a user message; consecutive user messages merge into one whose
// blocks are joined by blank lines.
Json merge_tool_messages(const Json& messages) {
  Json merged = Json::array();
  auto last_is_user_with_blocks = [&merged] {
    return !merged.empty() && role_of(merged.back()) == "user" && merged.back().contains("content_blocks");
  };
  for (const Json& message : messages) {
    const std::string role = role_of(message);
    if (role == "tool") {
      Json block = {{"type", "tool_result"},
                    {"tool_use_id", message.value("tool_call_id", Json(""))},
                    {"content", message.value("content", Json(""))}};
      if (last_is_user_with_blocks()) {
        merged.back()["content_blocks"].push_back(std::move(block));
      } else {
        merged.push_back({{"role", "user"}, {"content_blocks", Json::array({std::move(block)})}});
      }
    } else if (role == "user") {
      Json block = {{"type", "text"}, {"text", message.value("content", Json(""))}};
      if (last_is_user_with_blocks()) {
        merged.back()["content_blocks"].push_back(std::move(block));
      } else {
        merged.push_back({{"role", "user"},
                          {"content", message.value("content", Json(""))},
                          {"content_blocks", Json::array({std::move(block)})}});
      }
    } else {
      merged.push_back(message);
    }
  }
  return merged;
}

// Several results in one user message are put in the order of the calls of the last assistant turn with calls.
void sort_tool_results_by_call_order(Json& messages) {
  std::map<std::string, size_t> call_order;
  for (Json& message : messages) {
    const std::string role = role_of(message);
    if (role == "assistant" && tool_call_count(message) > 0) {
      call_order.clear();
      const Json& calls = message["tool_calls"];
      for (size_t i = 0; i < calls.size(); ++i) {
        std::string id;
        if (const Json* call_id = field(calls[i], "id"); truthy(call_id) && call_id->is_string()) {
          id = call_id->get<std::string>();
        } else if (const Json* function = field(calls[i], "function")) {
          if (const Json* function_id = field(*function, "id"); function_id && function_id->is_string()) {
            id = function_id->get<std::string>();
          }
        }
        if (!id.empty()) call_order[id] = i;
      }
    } else if (role == "user" && truthy(field(message, "content_blocks")) && !call_order.empty()) {
      Json& blocks = message["content_blocks"];
      std::vector<Json> results;
      for (const Json& block : blocks) {
        if (block.value("type", "") == "tool_result") results.push_back(block);
      }
      if (results.size() < 2) continue;
      auto order_of = [&call_order](const Json& block) {
        const Json* id = field(block, "tool_use_id");
        if (!id || !id->is_string()) return size_t{0};
        auto it = call_order.find(id->get<std::string>());
        return it == call_order.end() ? size_t{0} : it->second;
      };
      std::stable_sort(results.begin(), results.end(),
                       [&](const Json& a, const Json& b) { return order_of(a) < order_of(b); });
      size_t next = 0;
      for (Json& block : blocks) {
        if (block.value("type", "") == "tool_result") block = results[next++];
      }
    }
  }
}

// A block's type as Python prints block.get("type").
std::string block_type(const Json& block) {
  const Json* type = field(block, "type");
  return type && type->is_string() ? type->get<std::string>() : "None";
}

std::string render_v4_user_blocks(const Json& blocks, size_t index) {
  std::string text;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Json& block = blocks[i];
    const std::string type = block_type(block);
    const std::string what = fmt::format("messages[{}] (merged) block {}", index, i);
    if (i > 0) text += "\n\n";
    if (type == "text") {
      const Json* block_text = field(block, "text");
      if (!block_text || !block_text->is_string()) fail("{}: a user message's content must be a string", what);
      text += block_text->get<std::string>();
    } else if (type == "tool_result") {
      const Json* content = field(block, "content");
      std::string result;
      if (content && content->is_array()) {
        for (size_t j = 0; j < content->size(); ++j) {
          if (j > 0) result += "\n\n";
          const Json& part = (*content)[j];
          const std::string part_type = block_type(part);
          const Json part_text = part.value("text", Json(""));
          result += part_type == "text" ? text_of(&part_text, what + " text") : "[Unsupported " + part_type + "]";
        }
      } else {
        result = text_of(content, what + " content");
      }
      text += "<tool_result>" + result + "</tool_result>";
    } else {
      text += "[Unsupported " + type + "]";
    }
  }
  return text;
}

std::string render_v4_message(size_t index, const Json& messages, bool thinking, bool drop_thinking,
                              const std::optional<std::string>& reasoning_effort) {
  const Json& message = messages[index];
  const std::string role = role_of(message);
  const int last_user = find_last_user_index(messages);
  const std::string content_what = fmt::format("messages[{}].content", index);
  std::string prompt;
  if (index == 0 && thinking && reasoning_effort == "max") prompt += kV4ReasoningEffortMax;
  if (role == "system") {
    prompt += text_or_empty(field(message, "content"), content_what);
    prompt += render_system_sections(DeepSeekEncoding::kV4, message, index);
  } else if (role == "developer") {
    if (!truthy(field(message, "content"))) fail("messages[{}]: a developer message needs content", index);
    prompt += kUser;
    prompt += text_of(field(message, "content"), content_what);
    prompt += render_system_sections(DeepSeekEncoding::kV4, message, index);
  } else if (role == "user") {
    prompt += kUser;
    const Json* blocks = field(message, "content_blocks");
    prompt += truthy(blocks) ? render_v4_user_blocks(*blocks, index)
                             : text_or_empty(field(message, "content"), content_what);
  } else if (role == "latest_reminder") {
    prompt += kLatestReminder;
    prompt += text_of(field(message, "content"), content_what);
  } else if (role == "assistant") {
    if (thinking && (!drop_thinking || static_cast<int>(index) > last_user)) {
      prompt += text_or_empty(reasoning_of(message), fmt::format("messages[{}].reasoning_content", index));
      prompt += kThinkEnd;
    }
    prompt += text_or_empty(field(message, "content"), content_what);
    prompt += render_tool_calls(DeepSeekEncoding::kV4, message, index);
    prompt += kEos;
  } else {
    fail("messages[{}]: unknown role '{}'", index, role);
  }
  // A user turn hands over to the assistant unless more input follows it.
  const bool input_follows = index + 1 < messages.size() && role_of(messages[index + 1]) != "assistant" &&
                             role_of(messages[index + 1]) != "latest_reminder";
  if (!input_follows && (role == "user" || role == "developer")) {
    prompt += kAssistant;
    const bool opens_thinking = thinking && (!drop_thinking || static_cast<int>(index) >= last_user);
    prompt += opens_thinking ? kThinkStart : kThinkEnd;
  }
  return prompt;
}

std::string encode_v4(const Json& messages, const DeepSeekEncodeOptions& options) {
  if (options.reasoning_effort && *options.reasoning_effort != "max" && *options.reasoning_effort != "high") {
    fail("reasoning_effort must be \"max\" or \"high\", got '{}'", *options.reasoning_effort);
  }
  Json full = merge_tool_messages(messages);
  sort_tool_results_by_call_order(full);
  // Conversations with tools keep every turn's reasoning: the model follows its multi-step tool use by it.
  const bool has_tools = std::any_of(full.begin(), full.end(), [](const Json& m) { return truthy(field(m, "tools")); });
  const bool drop_thinking = options.drop_thinking && !has_tools;
  if (options.thinking && drop_thinking) {
    const int last_user = find_last_user_index(full);
    Json kept = Json::array();
    for (size_t i = 0; i < full.size(); ++i) {
      const std::string role = role_of(full[i]);
      if (role == "user" || role == "system" || role == "tool" || role == "latest_reminder" ||
          role == "direct_search_results" || static_cast<int>(i) >= last_user) {
        kept.push_back(std::move(full[i]));
      } else if (role == "assistant") {
        full[i].erase("reasoning_content");
        kept.push_back(std::move(full[i]));
      }  // other roles (developer) before the last user message are dropped
    }
    full = std::move(kept);
  }
  std::string prompt(kBos);
  for (size_t i = 0; i < full.size(); ++i) {
    prompt += render_v4_message(i, full, options.thinking, drop_thinking, options.reasoning_effort);
  }
  return prompt;
}

bool kwarg_flag(const Json& kwargs, const char* key, bool fallback) {
  const Json* value = field(kwargs, key);
  if (!value || value->is_null()) return fallback;
  if (!value->is_boolean()) fail("chat_template_kwargs.{} must be a boolean, got {}", key, value->type_name());
  return value->get<bool>();
}

}  // namespace

std::string encode_deepseek_messages(DeepSeekEncoding encoding, const nlohmann::ordered_json& messages,
                                     const DeepSeekEncodeOptions& options) {
  if (!messages.is_array()) fail("messages must be a list");
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object()) fail("messages[{}] must be an object", i);
  }
  return encoding == DeepSeekEncoding::kV32 ? encode_v32(messages, options) : encode_v4(messages, options);
}

std::string render_deepseek_chat(DeepSeekEncoding encoding, const ChatTemplateInput& input) {
  const Json& kwargs = input.extra_kwargs;
  DeepSeekEncodeOptions options;
  options.thinking = kwarg_flag(kwargs, "thinking", false) || kwarg_flag(kwargs, "enable_thinking", false);
  options.drop_thinking = kwarg_flag(kwargs, "drop_thinking", true);
  if (const Json* effort = field(kwargs, "reasoning_effort"); effort && !effort->is_null()) {
    if (!effort->is_string()) fail("chat_template_kwargs.reasoning_effort must be a string, got {}", effort->type_name());
    // As vLLM: the levels the V4 encoder knows take effect, others (low, medium) are its default.
    const std::string level = effort->get<std::string>();
    if (encoding == DeepSeekEncoding::kV4 && (level == "max" || level == "high")) options.reasoning_effort = level;
  }

  Json messages = input.messages;
  const bool has_tools = input.tools.is_array() && !input.tools.empty();
  const Json* schema = nullptr;
  if (input.response_format.is_object() && input.response_format.value("type", "") == "json_schema") {
    if (const Json* json_schema = field(input.response_format, "json_schema")) schema = field(*json_schema, "schema");
  }
  if (has_tools || schema) {
    if (messages.empty() || role_of(messages[0]) != "system") {
      messages.insert(messages.begin(), Json{{"role", "system"}});
    }
    if (has_tools) messages[0]["tools"] = input.tools;
    if (schema) messages[0]["response_format"] = *schema;
  }
  return encode_deepseek_messages(encoding, messages, options);
}

std::optional<DeepSeekEncoding> deepseek_encoding_of_model_dir(const std::filesystem::path& dir) {
  std::ifstream in(dir / "config.json");
  if (!in) return std::nullopt;
  const auto config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return std::nullopt;
  auto named = [&config](std::string_view model_type, std::string_view architecture) {
    if (config.value("model_type", "") == model_type) return true;
    const auto architectures = config.find("architectures");
    return architectures != config.end() && architectures->is_array() &&
           std::any_of(architectures->begin(), architectures->end(),
                       [&](const auto& name) { return name.is_string() && name.template get<std::string>() == architecture; });
  };
  if (named("deepseek_v32", "DeepseekV32ForCausalLM")) return DeepSeekEncoding::kV32;
  if (named("deepseek_v4", "DeepseekV4ForCausalLM")) return DeepSeekEncoding::kV4;
  return std::nullopt;
}

}  // namespace tern::chat
