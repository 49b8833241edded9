#pragma once
// The entry point's error handling, shared by `tern` and `tern-engine-bench`: --help prints the help; a command
// line CLI11 cannot parse prints `NAME: error: ...` (usage_error.h) and exits 2; a command's failure prints
// `tern: error: ...` and exits 1.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "cli/usage_error.h"

namespace tern::cli {

inline int run(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "%s: error: %s\nRun with --help for more information.\n", app.get_name().c_str(),
                 usage_error_message(app, e).c_str());
    return kUsageErrorExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tern: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace tern::cli
