// `tern chat` in a pseudo-terminal, as a person uses it: scripted turns with streamed replies, the commands, Ctrl-C
// in the middle of a reply (the reply stops, the chat goes on) and at the prompt, Ctrl-D to leave, and the
// reasoning of a template that opens <think> shown dimmed or hidden.
#include <poll.h>
#include <pty.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "fixtures.h"

namespace tern {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr const char* kPrompt = "> \x1b[0m";  // the prompt as a terminal gets it (bold "> ")

class TerminalChat {
 public:
  explicit TerminalChat(std::vector<std::string> args) {
    args.insert(args.begin(), {testing::tern_binary().string(), "chat", "--threads", "1"});
    pid_ = forkpty(&master_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~TerminalChat() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }

  // Reads until the screen so far (after `from`) contains `text`; false after `timeout`.
  bool wait_for(const std::string& text, size_t from, std::chrono::milliseconds timeout = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (screen_.find(text, from) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(left)) return false;
    }
    return true;
  }
  // Reads until at least `count` more bytes than `from` have arrived.
  bool wait_for_bytes(size_t from, size_t count, std::chrono::milliseconds timeout = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (screen_.size() < from + count) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(left)) return false;
    }
    return true;
  }
  void type(const std::string& keys) { ASSERT_EQ(write(master_, keys.data(), keys.size()), ssize_t(keys.size())); }
  // The exit code once the process ends (-1 after `timeout`), reading what it still prints meanwhile.
  int exit_code(std::chrono::milliseconds timeout = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) return -1;
      read_some(50ms);
    }
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  const std::string& screen() const { return screen_; }
  size_t size() const { return screen_.size(); }

 private:
  bool read_some(std::chrono::milliseconds timeout) {
    pollfd fd{master_, POLLIN, 0};
    if (poll(&fd, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char buffer[4096];
    const ssize_t n = read(master_, buffer, sizeof(buffer));
    if (n <= 0) return false;
    screen_.append(buffer, static_cast<size_t>(n));
    return true;
  }

  int master_ = -1;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string screen_;
};

std::string chat_model() { return (testing::fixtures_dir() / "models" / "qwen3-chat-tiny").string(); }

TEST(ChatTerminal, ScriptedTurnsAndCommands) {
  TerminalChat chat({"--model", chat_model(), "--max-tokens", "6", "--ignore-eos"});
  ASSERT_TRUE(chat.wait_for(kPrompt, 0)) << chat.screen();
  for (const std::string turn : {"hello\n", "and a second turn\n"}) {
    const size_t from = chat.size();
    chat.type(turn);
    ASSERT_TRUE(chat.wait_for(kPrompt, from)) << chat.screen();
    // The echoed line, then six tokens of reply text, then the prompt again.
    const std::string reply = chat.screen().substr(from + turn.size() + 1);
    EXPECT_GT(reply.size(), std::string(kPrompt).size() + 2) << chat.screen();
  }
  size_t from = chat.size();
  chat.type("/reset\n");
  ASSERT_TRUE(chat.wait_for("(conversation cleared)", from)) << chat.screen();
  from = chat.size();
  chat.type("/nonsense\n");
  ASSERT_TRUE(chat.wait_for("unknown command", from)) << chat.screen();
  ASSERT_TRUE(chat.wait_for(kPrompt, from)) << chat.screen();
  chat.type("/exit\n");
  EXPECT_EQ(chat.exit_code(), 0) << chat.screen();
}

TEST(ChatTerminal, CtrlCStopsAReplyAndTheChatGoesOn) {
  // No length limit: a reply runs until the context is full (seconds on the CPU) unless stopped.
  TerminalChat chat({"--model", chat_model(), "--ignore-eos"});
  ASSERT_TRUE(chat.wait_for(kPrompt, 0)) << chat.screen();
  for (const std::string turn : {"write a long story\n", "another one\n"}) {
    const size_t from = chat.size();
    chat.type(turn);
    ASSERT_TRUE(chat.wait_for_bytes(from + turn.size() + 1, 40)) << chat.screen();  // the reply is streaming
    chat.type("\x03");
    ASSERT_TRUE(chat.wait_for("[stopped]", from, 10s)) << chat.screen();
    ASSERT_TRUE(chat.wait_for(kPrompt, from, 10s)) << chat.screen();
  }
  size_t from = chat.size();
  chat.type("\x03");  // at the prompt: a hint, not an exit
  ASSERT_TRUE(chat.wait_for("Ctrl-D leaves", from)) << chat.screen();
  ASSERT_TRUE(chat.wait_for(kPrompt, from)) << chat.screen();
  chat.type("\x04");  // Ctrl-D on an empty line: end of input
  EXPECT_EQ(chat.exit_code(), 0) << chat.screen();
}

// The chat fixture with a template whose generation prompt opens a reasoning block, so that every reply is
// reasoning until the model writes </think> (as Qwen3's thinking models, DeepSeek-R1).
fs::path reasoning_model() {
  const fs::path source = testing::fixtures_dir() / "models" / "qwen3-chat-tiny";
  const fs::path dir = fs::temp_directory_path() / ("tern_chat_reasoning_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json"}) {
    fs::create_symlink(source / file, dir / file);
  }
  auto config = testing::read_json(source / "tokenizer_config.json");
  config["chat_template"] =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  return dir;
}

TEST(ChatTerminal, ReasoningIsDimmedOrHidden) {
  const fs::path model = reasoning_model();
  {
    TerminalChat chat({"--model", model.string(), "--max-tokens", "6", "--ignore-eos"});
    ASSERT_TRUE(chat.wait_for(kPrompt, 0)) << chat.screen();
    const size_t from = chat.size();
    chat.type("think\n");
    ASSERT_TRUE(chat.wait_for(kPrompt, from)) << chat.screen();
    EXPECT_NE(chat.screen().find("\x1b[2m", from), std::string::npos) << chat.screen();
    chat.type("/exit\n");
    EXPECT_EQ(chat.exit_code(), 0);
  }
  {
    TerminalChat chat({"--model", model.string(), "--max-tokens", "6", "--ignore-eos", "--hide-reasoning"});
    ASSERT_TRUE(chat.wait_for(kPrompt, 0)) << chat.screen();
    const size_t from = chat.size();
    chat.type("think\n");
    ASSERT_TRUE(chat.wait_for(kPrompt, from)) << chat.screen();
    // Only the echoed line, the reply's closing newline and the prompt: the reasoning is not shown.
    const size_t reply_start = chat.screen().find("think\r\n", from) + 7;
    const size_t next_prompt = chat.screen().find("\x1b[1m> ", reply_start);
    EXPECT_EQ(chat.screen().substr(reply_start, next_prompt - reply_start), "\r\n") << chat.screen();
    chat.type("/exit\n");
    EXPECT_EQ(chat.exit_code(), 0);
  }
  fs::remove_all(model);
}

}  // namespace
}  // namespace tern
