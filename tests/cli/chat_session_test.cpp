// `tern chat`'s conversation: each prompt holds every earlier turn (rendered by the model's template), /reset
// forgets them, and the commands typed at the prompt are told from messages.
#include "cli/chat_session.h"

#include <gtest/gtest.h>

namespace tern::cli {
namespace {

chat::ChatTemplate plain_template() {
  return chat::ChatTemplate(
      "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}[assistant] "
      "{% endif %}");
}

TEST(ChatSession, EachPromptHoldsTheConversationSoFar) {
  const auto chat_template = plain_template();
  ChatSession session(chat_template, "be brief");
  EXPECT_EQ(session.prompt_for("hi"), "[system] be brief\n[user] hi\n[assistant] ");
  session.add_reply("hello");
  EXPECT_EQ(session.prompt_for("again"),
            "[system] be brief\n[user] hi\n[assistant] hello\n[user] again\n[assistant] ");
  EXPECT_EQ(session.num_turns(), 2u);
}

TEST(ChatSession, ResetKeepsOnlyTheSystemPromptAndADroppedMessageIsGone) {
  const auto chat_template = plain_template();
  ChatSession session(chat_template, "");
  session.prompt_for("first");
  session.add_reply("one");
  session.reset();
  EXPECT_EQ(session.num_turns(), 0u);
  session.prompt_for("too long");
  session.drop_last_message();
  EXPECT_EQ(session.prompt_for("short"), "[user] short\n[assistant] ");
}

TEST(ChatCommands, CommandsAreToldFromMessages) {
  EXPECT_EQ(parse_chat_command("hello /reset"), ChatCommand::kMessage);
  EXPECT_EQ(parse_chat_command("  \t"), ChatCommand::kEmpty);
  EXPECT_EQ(parse_chat_command(" /reset "), ChatCommand::kReset);
  EXPECT_EQ(parse_chat_command("/clear"), ChatCommand::kReset);
  EXPECT_EQ(parse_chat_command("/exit"), ChatCommand::kExit);
  EXPECT_EQ(parse_chat_command("/quit\r"), ChatCommand::kExit);
  EXPECT_EQ(parse_chat_command("/help"), ChatCommand::kHelp);
  EXPECT_EQ(parse_chat_command("/resett"), ChatCommand::kUnknown);
}

}  // namespace
}  // namespace tern::cli
