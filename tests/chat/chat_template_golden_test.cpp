// Every conversation of the chat goldens (rendered by transformers' apply_chat_template) renders byte for byte,
// from the tokenizer fixtures and from the model directories that ship the same templates.
#include <gtest/gtest.h>

#include "chat/chat_template.h"
#include "fixtures.h"

namespace tern::chat {
namespace {

struct GoldenSource {
  std::string golden;     // tokenizers/<name>/chat_golden.json
  std::string template_dir;  // where the template is read from
};

void PrintTo(const GoldenSource& source, std::ostream* os) { *os << source.template_dir; }

class ChatGoldenTest : public ::testing::TestWithParam<GoldenSource> {};

TEST_P(ChatGoldenTest, RendersEveryConversationByteIdentically) {
  const auto fixtures = testing::fixtures_dir();
  const GoldenSource& source = GetParam();
  ChatTemplate chat_template = ChatTemplate::from_tokenizer_dir(fixtures / source.template_dir);
  std::ifstream in(fixtures / "tokenizers" / source.golden / "chat_golden.json");
  auto goldens = nlohmann::ordered_json::parse(in);
  ASSERT_FALSE(goldens.empty());
  for (auto it = goldens.begin(); it != goldens.end(); ++it) {
    SCOPED_TRACE(it.key());
    ChatTemplateInput input;
    input.messages = it.value()["messages"];
    const auto& kwargs = it.value()["kwargs"];
    for (auto kw = kwargs.begin(); kw != kwargs.end(); ++kw) {
      if (kw.key() == "tools") {
        input.tools = kw.value();
      } else if (kw.key() == "add_generation_prompt") {
        input.add_generation_prompt = kw.value().get<bool>();
      } else {
        input.extra_kwargs[kw.key()] = kw.value();
      }
    }
    EXPECT_EQ(chat_template.render(input), it.value()["rendered"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ChatGoldenTest,
                         ::testing::Values(GoldenSource{"qwen3", "tokenizers/qwen3"},
                                           GoldenSource{"llama3", "tokenizers/llama3"},
                                           GoldenSource{"qwen3", "models/qwen3-chat-tiny"},
                                           GoldenSource{"llama3", "models/llama3-chat-tiny"}),
                         [](const auto& info) {
                           std::string name = info.param.template_dir;
                           for (char& c : name) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace tern::chat
