// gpt-oss's real chat template (the harmony format, data/gpt_oss/chat_template.jinja as openai/gpt-oss-20b ships
// it) must render as transformers renders it: tools as a TypeScript namespace, tool calls to=functions.NAME, tool
// results, reasoning effort, built-in tools, and the template's own refusals (data/gpt_oss/template_goldens.json,
// made by make_template_goldens.py with jinja2).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "chat/chat_template.h"
#include "core/error.h"

namespace tern::chat {
namespace {

const std::filesystem::path kGptOssDir = std::filesystem::path(__FILE__).parent_path() / "data" / "gpt_oss";

nlohmann::ordered_json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return nlohmann::ordered_json::parse(buffer.str());
}

// The template writes today's date (strftime_now); the goldens hold DATE in its place.
std::string without_date(const std::string& prompt) {
  return std::regex_replace(prompt, std::regex(R"(Current date: \d{4}-\d{2}-\d{2})"), "Current date: DATE");
}

TEST(GptOssTemplateTest, RendersAsTransformersDoes) {
  ChatTemplate chat_template = ChatTemplate::from_tokenizer_dir(kGptOssDir);
  const auto goldens = read_json(kGptOssDir / "template_goldens.json");
  ASSERT_GE(goldens.size(), 7u);
  for (const auto& golden : goldens) {
    SCOPED_TRACE(golden["request"].dump());
    ChatTemplateInput input = ChatTemplateInput::from_request(golden["request"]);
    if (golden.contains("error")) {
      EXPECT_THROW(chat_template.render(input), Error);
    } else {
      EXPECT_EQ(without_date(chat_template.render(input)), golden["rendered"].get<std::string>());
    }
  }
}

}  // namespace
}  // namespace tern::chat
