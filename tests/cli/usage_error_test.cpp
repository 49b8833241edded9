// The errors of command lines CLI11 cannot parse (src/cli/usage_error.h): on a small app shaped like tern's (a
// subcommand with a required --model), a typo names the unexpected argument and the nearest option or command
// rather than what CLI11 checks first; and `tern` itself exits 2 on them, 0 on --help.
#include "cli/usage_error.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fixtures.h"
#include "run_command.h"

namespace tern::cli {
namespace {

// The message for argv (after the program name), or "parsed" when it parses.
std::string message_for(std::vector<std::string> args) {
  CLI::App app{"test", "tern"};
  app.require_subcommand(1);
  CLI::App* serve = app.add_subcommand("serve", "serve");
  std::string model;
  int port = 0;
  serve->add_option("--model", model)->required();
  serve->add_option("--port", port);
  serve->add_option("--max-model-len", port);
  app.add_subcommand("generate", "generate");
  args.insert(args.begin(), "tern");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return usage_error_message(app, e);
  }
  return "parsed";
}

TEST(UsageErrorTest, AMistypedOptionIsNamedWithItsNearestOption) {
  // Without --model CLI11 would say "--model is required".
  EXPECT_EQ(message_for({"serve", "--modle", "DIR"}),
            "unknown option --modle for `tern serve` (did you mean --model?)");
  EXPECT_EQ(message_for({"serve", "--model", "DIR", "--prot", "80", "EXTRA"}),
            "unknown option --prot for `tern serve` (did you mean --port?); unexpected argument 'EXTRA'");
  EXPECT_EQ(message_for({"serve", "--model", "DIR", "--max-model-length=8"}),
            "unknown option --max-model-length for `tern serve` (did you mean --max-model-len?)");
  EXPECT_EQ(message_for({"serve", "--model", "DIR", "--verbose"}), "unknown option --verbose for `tern serve`");
}

TEST(UsageErrorTest, AMistypedCommandIsNamedWithItsNearestCommand) {
  EXPECT_EQ(message_for({"serv", "--model", "DIR"}).rfind("unknown command 'serv' (did you mean 'serve'?)", 0), 0u);
  EXPECT_EQ(message_for({"bench"}), "unknown command 'bench'");
}

TEST(UsageErrorTest, OtherErrorsAreCli11s) {
  EXPECT_EQ(message_for({"serve"}), "--model is required");
  EXPECT_EQ(message_for({"serve", "--model", "DIR", "--port", "abc"}), "Could not convert: --port = abc");
  EXPECT_EQ(message_for({}), "A subcommand is required");
  EXPECT_EQ(message_for({"serve", "--model", "DIR"}), "parsed");
}

TEST(UsageErrorTest, TernExitsTwoOnUsageErrors) {
  const std::string tern = testing::tern_binary().string();
  EXPECT_EQ(testing::run_command({tern, "serve", "--modle", "DIR"}).exit_code, kUsageErrorExitCode);
  EXPECT_EQ(testing::run_command({tern, "serv"}).exit_code, kUsageErrorExitCode);
  EXPECT_EQ(testing::run_command({tern, "serve"}).exit_code, kUsageErrorExitCode);
  EXPECT_EQ(testing::run_command({tern, "serve", "--help"}).exit_code, 0);
}

}  // namespace
}  // namespace tern::cli
