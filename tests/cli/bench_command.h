#pragma once
// Runs `tern bench` through the shell for the bench tests, its output and errors captured in files of a test's
// directory.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fixtures.h"

namespace tern::testing {

struct BenchRun {
  int exit_code = -1;
  std::string out, err;
};

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// `tern bench <flags>` (flags as the shell splits them), with stdout and stderr in `dir`.
inline BenchRun run_bench(const std::filesystem::path& dir, const std::string& flags) {
  const std::string command = tern_binary().string() + " bench " + flags + " > " + (dir / "out").string() + " 2> " +
                              (dir / "err").string();
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(dir / "out"), read_file(dir / "err")};
}

}  // namespace tern::testing
