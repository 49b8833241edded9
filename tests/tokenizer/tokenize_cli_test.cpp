// `tern tokenize` as a user runs it: JSON on stdin, JSON on stdout, `tern: error: ...` and exit 1 on bad input.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "fixtures.h"

namespace tern {
namespace {

struct RunResult {
  int exit_code;
  std::string out, err;
};

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

RunResult run_tern(const std::string& args, const std::string& stdin_text) {
  const auto dir = std::filesystem::temp_directory_path() / ("tern_tokenize_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "in") << stdin_text;
  const std::string command = testing::tern_binary().string() + " " + args + " < " + (dir / "in").string() + " > " +
                              (dir / "out").string() + " 2> " + (dir / "err").string();
  const int status = std::system(command.c_str());
  RunResult result{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir / "out"), slurp(dir / "err")};
  std::filesystem::remove_all(dir);
  return result;
}

std::string tokenizer_arg(const std::string& name) {
  return "tokenize --tokenizer " + (testing::fixtures_dir() / "tokenizers" / name).string();
}

TEST(TokenizeCli, EncodesGoldenCases) {
  for (const std::string name : {"qwen3", "llama2"}) {
    const auto golden = testing::read_json(testing::fixtures_dir() / "tokenizers" / name / "encode_golden.json");
    nlohmann::json texts = nlohmann::json::array(), expected = nlohmann::json::array();
    for (const auto& c : golden.at("cases")) {
      texts.push_back(c.at("text"));
      expected.push_back(c.at("ids"));
    }
    const RunResult result = run_tern(tokenizer_arg(name), texts.dump());
    ASSERT_EQ(result.exit_code, 0) << result.err;
    EXPECT_EQ(nlohmann::json::parse(result.out), expected);
  }
}

TEST(TokenizeCli, RejectsBadInput) {
  RunResult result = run_tern(tokenizer_arg("qwen3"), "not json");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("tern: error: tokenize: stdin is not valid JSON"), std::string::npos) << result.err;

  result = run_tern(tokenizer_arg("qwen3"), R"({"a": 1})");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("array of strings"), std::string::npos) << result.err;

  result = run_tern(tokenizer_arg("qwen3"), R"(["ok", 3])");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("element 1"), std::string::npos) << result.err;

  result = run_tern("tokenize --tokenizer " + std::filesystem::temp_directory_path().string(), R"(["x"])");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.err.find("no tokenizer.json"), std::string::npos) << result.err;
}

TEST(TokenizeCli, HelpDocumentsFlags) {
  for (const std::string command : {"tokenize", "bench-tokenizer"}) {
    const RunResult result = run_tern(command + " --help", "");
    EXPECT_EQ(result.exit_code, 0);
    EXPECT_NE(result.out.find("--tokenizer"), std::string::npos) << result.out;
  }
}

}  // namespace
}  // namespace tern
