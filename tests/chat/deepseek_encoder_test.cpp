// DeepSeek's built-in encoder must render what DeepSeek's reference encoders (encoding_dsv32.py, encoding_dsv4.py)
// render, byte for byte, and refuse what they refuse (data/deepseek_encoder_goldens.json, made by
// make_deepseek_encoder_goldens.py from the references).
#include "chat/deepseek_encoder.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "chat/chat_template.h"
#include "core/error.h"

namespace tern::chat {
namespace {

using Json = nlohmann::ordered_json;

const Json& goldens() {
  static const Json parsed = [] {
    std::ifstream in(std::filesystem::path(__FILE__).parent_path() / "data" / "deepseek_encoder_goldens.json");
    return Json::parse(in);
  }();
  return parsed;
}

DeepSeekEncoding encoding_of(const Json& golden) {
  return golden.at("version") == "v32" ? DeepSeekEncoding::kV32 : DeepSeekEncoding::kV4;
}

std::string label(const Json& golden) {
  return golden.at("version").get<std::string>() + " " + golden.at("name").get<std::string>() + " " +
         golden.value("options", Json::object()).dump();
}

// The server hands the encoder tool-call arguments parsed into objects (chat_request.cpp), not JSON text.
Json with_parsed_arguments(Json messages) {
  for (Json& message : messages) {
    if (!message.contains("tool_calls")) continue;
    for (Json& call : message["tool_calls"]) {
      Json& arguments = call["function"]["arguments"];
      Json parsed = Json::parse(arguments.get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object()) arguments = std::move(parsed);
    }
  }
  return messages;
}

TEST(DeepSeekEncoderTest, GoldensCoverBothVersions) {
  int num_v32 = 0;
  int num_v4 = 0;
  for (const Json& golden : goldens().at("encode")) {
    if (!golden.contains("prompt")) continue;
    (encoding_of(golden) == DeepSeekEncoding::kV32 ? num_v32 : num_v4)++;
  }
  EXPECT_GE(num_v32, 30);
  EXPECT_GE(num_v4, 30);
}

TEST(DeepSeekEncoderTest, MatchesTheReferenceEncoders) {
  for (const Json& golden : goldens().at("encode")) {
    const Json& options_json = golden.at("options");
    DeepSeekEncodeOptions options;
    options.thinking = options_json.at("thinking_mode") == "thinking";
    options.drop_thinking = options_json.value("drop_thinking", true);
    if (options_json.contains("reasoning_effort")) options.reasoning_effort = options_json["reasoning_effort"];
    for (const Json& messages : {golden.at("messages"), with_parsed_arguments(golden.at("messages"))}) {
      if (golden.contains("error")) {
        EXPECT_THROW(encode_deepseek_messages(encoding_of(golden), messages, options), Error) << label(golden);
        continue;
      }
      try {
        EXPECT_EQ(encode_deepseek_messages(encoding_of(golden), messages, options), golden.at("prompt").get<std::string>())
            << label(golden);
      } catch (const Error& e) {
        ADD_FAILURE() << label(golden) << ": " << e.what();
      }
    }
  }
}

// An OpenAI request rendered through ChatTemplate, as the server renders it: tools and response_format on the
// system message, thinking from chat_template_kwargs.
TEST(DeepSeekEncoderTest, RendersRequestsAsTheServerDoes) {
  for (const Json& golden : goldens().at("request")) {
    const Json& request = golden.at("request");
    const ChatTemplate chat_template = ChatTemplate::deepseek(encoding_of(golden));
    ChatTemplateInput input;
    input.messages = with_parsed_arguments(request.at("messages"));
    input.tools = request.value("tools", Json());
    input.add_generation_prompt = true;
    input.extra_kwargs = request.value("chat_template_kwargs", Json::object());
    input.response_format = request.value("response_format", Json());
    EXPECT_EQ(chat_template.render(input), golden.at("prompt").get<std::string>()) << label(golden);
  }
}

TEST(DeepSeekEncoderTest, RejectsKwargsOfTheWrongType) {
  ChatTemplateInput input;
  input.messages = Json::array({{{"role", "user"}, {"content", "hi"}}});
  input.extra_kwargs = {{"thinking", "yes"}};
  EXPECT_THROW(ChatTemplate::deepseek(DeepSeekEncoding::kV4).render(input), Error);
  input.extra_kwargs = {{"reasoning_effort", 3}};
  EXPECT_THROW(ChatTemplate::deepseek(DeepSeekEncoding::kV4).render(input), Error);
}

TEST(DeepSeekEncoderTest, RejectsArgumentsThatAreNotAnObject) {
  const Json messages = Json::array(
      {{{"role", "user"}, {"content", "x"}},
       {{"role", "assistant"},
        {"content", ""},
        {"tool_calls", Json::array({{{"function", {{"name", "f"}, {"arguments", "[1, 2]"}}}}})}}});
  EXPECT_THROW(encode_deepseek_messages(DeepSeekEncoding::kV32, messages, {}), Error);
  EXPECT_THROW(encode_deepseek_messages(DeepSeekEncoding::kV4, messages, {}), Error);
}

TEST(DeepSeekEncoderTest, ChosenForDeepSeekModelsWithoutATemplate) {
  const std::filesystem::path fixture = std::filesystem::path(TERN_FIXTURES_DIR) / "models" / "deepseek_v4";
  EXPECT_EQ(deepseek_encoding_of_model_dir(fixture), DeepSeekEncoding::kV4);
  const auto chat_template = ChatTemplate::from_model_dir(fixture);
  ASSERT_TRUE(chat_template.has_value());
  EXPECT_EQ(chat_template->deepseek_encoding(), DeepSeekEncoding::kV4);
  EXPECT_EQ(deepseek_encoding_of_model_dir(std::filesystem::path(TERN_FIXTURES_DIR) / "models" / "deepseek_v3"),
            std::nullopt);

  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "tern_deepseek_v32_config_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["DeepseekV32ForCausalLM"]})";
  EXPECT_EQ(deepseek_encoding_of_model_dir(dir), DeepSeekEncoding::kV32);
  // A template the directory has wins over the built-in encoder.
  std::ofstream(dir / "chat_template.jinja") << "{{ messages[0].content }}";
  const auto with_template = ChatTemplate::from_model_dir(dir);
  ASSERT_TRUE(with_template.has_value());
  EXPECT_FALSE(with_template->deepseek_encoding().has_value());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tern::chat
