#pragma once
// What a command line that CLI11 cannot parse gets: one line naming what is wrong, exit code 2 (a usage error, as
// argparse's and vLLM's). CLI11 checks a missing required option or subcommand before it reports arguments it did
// not expect, so a mistyped flag (`tern serve --modle DIR`) would read as "--model is required": the unexpected
// arguments are named first, with the nearest option or command when one is a typo away.
#include <CLI/CLI.hpp>

#include <string>

namespace tern::cli {

constexpr int kUsageErrorExitCode = 2;

// The message for `error`, thrown by app.parse(); `app` still holds what the parse read.
std::string usage_error_message(const CLI::App& app, const CLI::ParseError& error);

}  // namespace tern::cli
