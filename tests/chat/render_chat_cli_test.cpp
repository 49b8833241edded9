// `tern render-chat` end to end: the goldens through the binary, and bad input rejected with exit code 1.
#include <gtest/gtest.h>

#include "fixtures.h"
#include "run_command.h"

namespace tern::chat {
namespace {

testing::CommandResult render_chat(const std::string& tokenizer, const std::string& input) {
  return testing::run_command(
      {testing::tern_binary().string(), "render-chat", "--tokenizer", (testing::fixtures_dir() / tokenizer).string()},
      input);
}

TEST(RenderChatCliTest, PrintsEveryGoldenPromptAsAJsonString) {
  for (const char* name : {"qwen3", "llama3"}) {
    std::ifstream in(testing::fixtures_dir() / "tokenizers" / name / "chat_golden.json");
    auto goldens = nlohmann::ordered_json::parse(in);
    for (auto it = goldens.begin(); it != goldens.end(); ++it) {
      SCOPED_TRACE(std::string(name) + "/" + it.key());
      nlohmann::ordered_json request = it.value()["kwargs"];
      request["messages"] = it.value()["messages"];
      auto result = render_chat(std::string("tokenizers/") + name, request.dump());
      ASSERT_EQ(result.exit_code, 0);
      EXPECT_EQ(nlohmann::json::parse(result.output).get<std::string>(), it.value()["rendered"].get<std::string>());
    }
  }
}

TEST(RenderChatCliTest, RejectsBadInput) {
  EXPECT_EQ(render_chat("tokenizers/qwen3", "not json").exit_code, 1);
  EXPECT_EQ(render_chat("tokenizers/qwen3", R"({"messages": "hello"})").exit_code, 1);
  EXPECT_EQ(render_chat("tokenizers/qwen3", R"({"tools": []})").exit_code, 1);
  EXPECT_EQ(render_chat("tokenizers/qwen3", R"({"messages": [], "add_generation_prompt": "yes"})").exit_code, 1);
  EXPECT_EQ(render_chat("tokenizers/qwen3", R"({"messages": []})").exit_code, 1);  // the template indexes messages[0]
  EXPECT_NE(render_chat("tokenizers/does-not-exist", R"({"messages": []})").exit_code, 0);
}

TEST(RenderChatCliTest, HelpDocumentsTheFlags) {
  auto result = testing::run_command({testing::tern_binary().string(), "render-chat", "--help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.output.find("--tokenizer"), std::string::npos);
  EXPECT_NE(result.output.find("--template"), std::string::npos);
  EXPECT_NE(result.output.find("add_generation_prompt"), std::string::npos);
}

}  // namespace
}  // namespace tern::chat
