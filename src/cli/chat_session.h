#pragma once
// A conversation held in the terminal (`tern chat`): the turns so far, rendered into each reply's prompt with the
// model's chat template, and the commands typed at its prompt.
#include <string>
#include <string_view>

#include "chat/chat_template.h"

namespace tern::cli {

// What a line typed at the chat prompt asks for.
enum class ChatCommand { kMessage, kEmpty, kReset, kExit, kHelp, kUnknown };
ChatCommand parse_chat_command(std::string_view line);

class ChatSession {
 public:
  // An empty `system_prompt` leaves the system message out (the template's default applies).
  ChatSession(const chat::ChatTemplate& chat_template, std::string system_prompt);

  // Adds the user's message and returns the prompt that asks for the reply to it.
  std::string prompt_for(const std::string& user_text);
  // The reply to the last message; without one (an error before any text) call drop_last_message instead.
  void add_reply(const std::string& content);
  void drop_last_message();
  // Forgets every turn (the system prompt stays).
  void reset();
  size_t num_turns() const;

 private:
  const chat::ChatTemplate& chat_template_;
  std::string system_prompt_;
  decltype(chat::ChatTemplateInput::messages) messages_;
};

}  // namespace tern::cli
