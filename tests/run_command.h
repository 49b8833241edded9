#pragma once
// Runs a command (no shell) and captures its standard output; standard error goes to the test log.
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace tern::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;
};

inline CommandResult run_command(const std::vector<std::string>& argv, const std::string& input = "") {
  int out_pipe[2], in_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(in_pipe) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(in_pipe[0], 0);
    dup2(out_pipe[1], 1);
    close(out_pipe[0]);
    close(in_pipe[1]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(in_pipe[0]);
  size_t written = 0;
  while (written < input.size()) {
    const ssize_t n = write(in_pipe[1], input.data() + written, input.size() - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  close(in_pipe[1]);
  CommandResult result;
  char buffer[4096];
  ssize_t n;
  while ((n = read(out_pipe[0], buffer, sizeof(buffer))) > 0) result.output.append(buffer, n);
  close(out_pipe[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace tern::testing
