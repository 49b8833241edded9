// `tern generate` as a newcomer calls it: text in and text out (the same tokens as the ids path gives), the chat
// template with --chat, a model given by its Hugging Face id from a local hub cache, and the errors of a typo.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "fixtures.h"
#include "run_command.h"
#include "tokenizer/tokenizer.h"

namespace tern {
namespace {

namespace fs = std::filesystem;
using testing::run_command;

const fs::path kPythonModel = testing::fixtures_dir() / "models" / "tern-py-13m";
const fs::path kChatModel = testing::fixtures_dir() / "models" / "qwen3-chat-tiny";

testing::CommandResult tern(std::vector<std::string> args) {
  args.insert(args.begin(), testing::tern_binary().string());
  return run_command(args);
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string text;
  for (int32_t id : ids) text += (text.empty() ? "" : ",") + std::to_string(id);
  return text;
}

// The ids `tern generate --prompt-ids` prints for `prompt`, decoded: what --prompt must print.
std::string expected_text(const fs::path& model, const std::vector<int32_t>& prompt, const std::string& max_tokens) {
  const auto ids = tern({"generate", "--model", model.string(), "--threads", "1", "--prompt-ids", join_ids(prompt),
                         "--max-tokens", max_tokens});
  EXPECT_EQ(ids.exit_code, 0);
  const Tokenizer tokenizer = Tokenizer::load(model);
  return tokenizer.decode(nlohmann::json::parse(ids.output).get<std::vector<int32_t>>(), /*skip_special_tokens=*/true);
}

TEST(GenerateText, APromptInTheGeneratedTextOut) {
  const std::string prompt = "def fibonacci(n):";
  const auto text = tern({"generate", "--model", kPythonModel.string(), "--threads", "1", "--prompt", prompt,
                          "--max-tokens", "24"});
  ASSERT_EQ(text.exit_code, 0);
  const Tokenizer tokenizer = Tokenizer::load(kPythonModel);
  EXPECT_EQ(text.output, expected_text(kPythonModel, tokenizer.encode(prompt, true), "24") + "\n");
  const auto echoed = tern({"generate", "--model", kPythonModel.string(), "--threads", "1", "--prompt", prompt,
                            "--max-tokens", "24", "--echo"});
  EXPECT_EQ(echoed.output, prompt + text.output);
}

TEST(GenerateText, ChatSendsThePromptThroughTheTemplate) {
  const std::string prompt = "Hello, who are you?";
  const auto text = tern({"generate", "--model", kChatModel.string(), "--threads", "1", "--prompt", prompt, "--chat",
                          "--max-tokens", "12", "--ignore-eos"});
  ASSERT_EQ(text.exit_code, 0);
  chat::ChatTemplateInput input;
  input.messages.push_back({{"role", "user"}, {"content", prompt}});
  input.add_generation_prompt = true;
  const std::string rendered = chat::ChatTemplate::from_model_dir(kChatModel)->render(input);
  const Tokenizer tokenizer = Tokenizer::load(kChatModel);
  const auto ids = tern({"generate", "--model", kChatModel.string(), "--threads", "1", "--prompt-ids",
                         join_ids(tokenizer.encode(rendered, false)), "--max-tokens", "12", "--ignore-eos"});
  EXPECT_EQ(text.output, tokenizer.decode(nlohmann::json::parse(ids.output).get<std::vector<int32_t>>(), true) + "\n");
}

TEST(GenerateText, MistakesAreRefusedWithAReason) {
  EXPECT_NE(tern({"generate", "--model", kPythonModel.string()}).exit_code, 0);  // no prompt
  EXPECT_NE(tern({"generate", "--model", kPythonModel.string(), "--prompt", "x", "--prompt-ids", "1"}).exit_code, 0);
  EXPECT_NE(tern({"generate", "--model", kPythonModel.string(), "--prompt", "x", "--chat"}).exit_code, 0);  // no template
  EXPECT_NE(tern({"generate", "--model", kPythonModel.string(), "--prompt", "x", "--backend", "gpu"}).exit_code, 0);
  EXPECT_NE(tern({"generate", "--model", kPythonModel.string(), "--prompt", "x", "--gpu-memory-utilization", "1.5"})
                .exit_code,
            0);
}

// A mistake in the engine's flags is told before the weights load (minutes, for a large model).
TEST(GenerateText, AMistakenSpeculativeConfigFailsBeforeTheWeightsLoad) {
  const std::string command = testing::tern_binary().string() + " generate --model " + kPythonModel.string() +
                              " --prompt x --speculative-config "
                              "'{\"method\": \"ngram\", \"num_speculative_tokens\": 3, \"prompt_lookup_mni\": 2}' 2>&1";
  const auto result = run_command({"/bin/sh", "-c", command});
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("unknown key 'prompt_lookup_mni'"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("weights"), std::string::npos) << result.output;
}

// A hub cache with the Python model as ORG/NAME's main snapshot (links to the fixture's files).
class HubCacheModel : public ::testing::Test {
 protected:
  void SetUp() override {
    cache_ = fs::temp_directory_path() / ("tern_cli_hub_" + std::to_string(getpid()));
    fs::remove_all(cache_);
    const fs::path snapshot = cache_ / "models--tern-fixtures--tern-py-13m" / "snapshots" / "0123abcd";
    fs::create_directories(snapshot);
    for (const auto& entry : fs::directory_iterator(kPythonModel)) {
      fs::create_symlink(entry.path(), snapshot / entry.path().filename());
    }
    fs::create_directories(cache_ / "models--tern-fixtures--tern-py-13m" / "refs");
    std::ofstream(cache_ / "models--tern-fixtures--tern-py-13m" / "refs" / "main") << "0123abcd";
    setenv("HF_HUB_CACHE", cache_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("HF_HUB_CACHE");
    fs::remove_all(cache_);
  }
  fs::path cache_;
};

TEST_F(HubCacheModel, AModelIdLoadsFromTheCache) {
  const std::vector<std::string> args = {"--threads", "1", "--prompt-ids", "1,822,18755", "--max-tokens", "8"};
  auto by_id = std::vector<std::string>{"generate", "--model", "tern-fixtures/tern-py-13m"};
  by_id.insert(by_id.end(), args.begin(), args.end());
  auto by_dir = std::vector<std::string>{"generate", "--model", kPythonModel.string()};
  by_dir.insert(by_dir.end(), args.begin(), args.end());
  const auto from_cache = tern(by_id);
  ASSERT_EQ(from_cache.exit_code, 0);
  EXPECT_EQ(from_cache.output, tern(by_dir).output);
  by_id[2] = "tern-fixtures/tern-py-13m@0123abcd";
  EXPECT_EQ(tern(by_id).output, from_cache.output);
}

TEST_F(HubCacheModel, AMissingIdFailsNamingWhereItLooked) {
  // stderr goes to the test log; the exit code says it failed, the unit test of hub_cache the message.
  EXPECT_EQ(tern({"generate", "--model", "tern-fixtures/no-such-model", "--prompt-ids", "1"}).exit_code, 1);
}

}  // namespace
}  // namespace tern
