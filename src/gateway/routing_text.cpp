#include "gateway/routing_text.h"

#include <nlohmann/json.hpp>

#include "core/nesting_limit.h"

namespace tern::gateway {

namespace {

using Json = nlohmann::json;

// Separators that do not occur in ordinary text keep "ab"+"c" and "a"+"bc" apart.
constexpr char kFieldSeparator = '\x1f';
constexpr char kRecordSeparator = '\x1e';

void append_prompt(std::string& out, const Json& prompt) {
  if (prompt.is_string()) {
    out += prompt.get_ref<const std::string&>();
  } else if (prompt.is_number_integer()) {
    out += std::to_string(prompt.get<int64_t>());
    out += ',';
  } else if (prompt.is_array()) {
    for (const Json& item : prompt) {
      append_prompt(out, item);
      if (!item.is_number_integer()) out += kRecordSeparator;
    }
  }
}

void append_content(std::string& out, const Json& content) {
  if (content.is_string()) {
    out += content.get_ref<const std::string&>();
  } else if (content.is_array()) {
    for (const Json& part : content) {
      if (!part.is_object()) continue;
      auto text = part.find("text");
      if (text != part.end() && text->is_string()) out += text->get_ref<const std::string&>();
    }
  }
}

}  // namespace

std::string routing_text(std::string_view path, std::string_view body) {
  // append_prompt recurses once per level; a replica refuses a body this deep anyway.
  if (!json_nesting_within_limit(body)) return {};
  const Json request = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!request.is_object()) return {};
  std::string text;
  if (path == "/v1/chat/completions") {
    auto messages = request.find("messages");
    if (messages == request.end() || !messages->is_array()) return {};
    for (const Json& message : *messages) {
      if (!message.is_object()) continue;
      auto role = message.find("role");
      if (role != message.end() && role->is_string()) text += role->get_ref<const std::string&>();
      text += kFieldSeparator;
      auto content = message.find("content");
      if (content != message.end()) append_content(text, *content);
      text += kRecordSeparator;
    }
  } else if (path == "/v1/completions") {
    auto prompt = request.find("prompt");
    if (prompt != request.end()) append_prompt(text, *prompt);
  }
  return text;
}

}  // namespace tern::gateway
