#pragma once
// The entry point's error handling, shared by `tern` and `tern-engine-bench`: CLI11 reports its own parse errors
// (and --help); a command's failure prints `tern: error: ...` and exits 1.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

namespace tern::cli {

inline int run(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tern: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace tern::cli
