#include "cli/chat_session.h"

namespace tern::cli {

ChatCommand parse_chat_command(std::string_view line) {
  const auto first = line.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return ChatCommand::kEmpty;
  const auto last = line.find_last_not_of(" \t\r");
  const std::string_view text = line.substr(first, last - first + 1);
  if (text.front() != '/') return ChatCommand::kMessage;
  if (text == "/reset" || text == "/clear") return ChatCommand::kReset;
  if (text == "/exit" || text == "/quit" || text == "/bye") return ChatCommand::kExit;
  if (text == "/help" || text == "/?") return ChatCommand::kHelp;
  return ChatCommand::kUnknown;
}

ChatSession::ChatSession(const chat::ChatTemplate& chat_template, std::string system_prompt)
    : chat_template_(chat_template), system_prompt_(std::move(system_prompt)) {
  reset();
}

std::string ChatSession::prompt_for(const std::string& user_text) {
  messages_.push_back({{"role", "user"}, {"content", user_text}});
  chat::ChatTemplateInput input;
  input.messages = messages_;
  input.add_generation_prompt = true;
  return chat_template_.render(input);
}

void ChatSession::add_reply(const std::string& content) {
  messages_.push_back({{"role", "assistant"}, {"content", content}});
}

void ChatSession::drop_last_message() {
  if (!messages_.empty()) messages_.erase(messages_.end() - 1);
}

void ChatSession::reset() {
  messages_ = decltype(messages_)::array();
  if (!system_prompt_.empty()) messages_.push_back({{"role", "system"}, {"content", system_prompt_}});
}

size_t ChatSession::num_turns() const {
  size_t turns = 0;
  for (const auto& message : messages_) turns += message.at("role") == "user" ? 1 : 0;
  return turns;
}

}  // namespace tern::cli
