// `tern-engine-bench bench ...`: the `tern bench` command (src/cli/cmd_bench.cpp, same flags and JSON) in a binary
// that links only the engine's layers, not the HTTP server, grammar and chat layers of `tern`: the GPU stage
// (scripts/gpu/stage.sh) builds it in a fraction of the time.
#include "cli/commands.h"
#include "cli/run.h"

int main(int argc, char** argv) {
  CLI::App app{"tern-engine-bench: the offline engine benchmark of `tern bench`", "tern-engine-bench"};
  app.require_subcommand(1);
  tern::cli::add_bench_command(app);
  return tern::cli::run(app, argc, argv);
}
