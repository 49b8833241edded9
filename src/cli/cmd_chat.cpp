// `tern chat`: an interactive conversation in the terminal, as llama.cpp's llama-cli and `ollama run` hold one: the
// model's chat template, replies streamed as they are generated, the history kept across turns, Ctrl-C to stop a
// reply without leaving.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <optional>
#include <string>

#include "chat/chat_output_parser.h"
#include "chat/chat_template.h"
#include "cli/chat_session.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/streamed_generation.h"
#include "cli/validators.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tern::cli {

namespace {

// Set by SIGINT. A signal handler can reach only such a flag; the reply loop and the prompt read it.
std::atomic<bool> interrupted{false};

// The signal may be delivered to any of the process's threads (the engine runs its own), so a read at the prompt
// is not sure to return with EINTR: the handler also writes a byte to this pipe, which the prompt waits on beside
// standard input.
int interrupt_pipe[2] = {-1, -1};

void on_interrupt(int) {
  interrupted = true;
  const char byte = 0;
  [[maybe_unused]] const ssize_t written = ::write(interrupt_pipe[1], &byte, 1);
}

void catch_interrupts() {
  if (::pipe2(interrupt_pipe, O_NONBLOCK | O_CLOEXEC) != 0) fail("chat: cannot create a pipe: {}", std::strerror(errno));
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
}

enum class LineRead { kLine, kInterrupted, kEnd };

// One line from standard input, read a byte at a time so that Ctrl-C at the prompt is seen at once.
LineRead read_line(std::string& line) {
  line.clear();
  while (true) {
    pollfd sources[2] = {{STDIN_FILENO, POLLIN, 0}, {interrupt_pipe[0], POLLIN, 0}};
    if (::poll(sources, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return LineRead::kEnd;
    }
    if (sources[1].revents & POLLIN) {
      char drained[64];
      while (::read(interrupt_pipe[0], drained, sizeof drained) > 0) {
      }
      // A Ctrl-C that stopped the last reply left its byte too; only one since then counts.
      if (interrupted.exchange(false)) return LineRead::kInterrupted;
    }
    if (!(sources[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char c = 0;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n == 1) {
      if (c == '\n') return LineRead::kLine;
      line += c;
    } else if (n == 0) {
      return line.empty() ? LineRead::kEnd : LineRead::kLine;
    } else if (errno != EINTR && errno != EAGAIN) {
      return LineRead::kEnd;
    }
  }
}

void print(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

struct ChatOptions {
  ModelFlags model;
  std::string system_prompt;
  std::optional<int32_t> max_tokens;
  bool hide_reasoning = false;
  SamplingFlags sampling;
  EngineFlags engine;
};

// Prints a reply's reasoning (dimmed on a terminal, or left out) and its content as they stream in.
class ReplyPrinter {
 public:
  ReplyPrinter(bool terminal, bool hide_reasoning) : terminal_(terminal), hide_reasoning_(hide_reasoning) {}

  void show(const chat::ChatDelta& delta) {
    if (!delta.reasoning_content.empty() && !hide_reasoning_) {
      if (!in_reasoning_ && terminal_) print("\x1b[2m");
      in_reasoning_ = true;
      print(delta.reasoning_content);
    }
    if (!delta.content.empty()) {
      end_reasoning();
      print(delta.content);
    }
  }

  void end_reasoning() {
    if (!in_reasoning_) return;
    print(terminal_ ? "\x1b[0m\n\n" : "\n\n");
    in_reasoning_ = false;
  }

 private:
  bool terminal_;
  bool hide_reasoning_;
  bool in_reasoning_ = false;
};

void run_chat(const ChatOptions& options) {
  const auto model_dir = options.model.model_dir();
  const Tokenizer tokenizer = Tokenizer::load(model_dir);
  const auto chat_template = chat::ChatTemplate::from_model_dir(model_dir);
  if (!chat_template) {
    fail("chat: {} has no chat template (a base model); continue a prompt with `tern generate --prompt` instead",
         model_dir.string());
  }
  EngineConfig engine = options.engine.to_config(model_dir);  // its mistakes before the loading
  auto model = options.model.load(options.engine.parallel);
  EngineCore core(*model, std::move(engine), tokenizer_text_streams(tokenizer));
  ChatSession session(*chat_template, options.system_prompt);
  const bool terminal = isatty(STDOUT_FILENO) != 0;
  catch_interrupts();
  print("tern chat: type a message; /reset forgets the conversation, /exit (or Ctrl-D) leaves, Ctrl-C stops a "
        "reply.\n");
  uint64_t next_request_id = 1;
  std::string line;
  while (true) {
    print(terminal ? "\x1b[1m> \x1b[0m" : "> ");
    const LineRead read = read_line(line);
    if (read == LineRead::kEnd) {
      print("\n");
      return;
    }
    if (read == LineRead::kInterrupted) {
      print("\n(/exit or Ctrl-D leaves)\n");
      continue;
    }
    switch (parse_chat_command(line)) {
      case ChatCommand::kEmpty:
        continue;
      case ChatCommand::kExit:
        return;
      case ChatCommand::kReset:
        session.reset();
        print("(conversation cleared)\n");
        continue;
      case ChatCommand::kHelp:
        print("/reset (or /clear): forget the conversation; /exit (or /quit, Ctrl-D): leave; Ctrl-C: stop a reply\n");
        continue;
      case ChatCommand::kUnknown:
        print("(unknown command; /help lists them)\n");
        continue;
      case ChatCommand::kMessage:
        break;
    }
    const std::string prompt = session.prompt_for(line);
    GenerateRequest request;
    request.prompt_token_ids = tokenizer.encode(prompt, /*add_special_tokens=*/false);
    if (static_cast<int64_t>(request.prompt_token_ids.size()) >= core.max_model_len()) {
      session.drop_last_message();
      print(fmt::format("(the conversation is {} tokens, the context {}: /reset to start again)\n",
                        request.prompt_token_ids.size(), core.max_model_len()));
      continue;
    }
    request.sampling = options.sampling.to_params();
    request.stop.ignore_eos = options.sampling.ignore_eos;
    request.stop.max_tokens = options.max_tokens;
    chat::ChatOutputOptions parser_options = chat::ChatOutputOptions::for_chat_template(*chat_template, prompt);
    parser_options.tool_call_parser.clear();
    request.stop.skip_special_tokens = !parser_options.keeps_special_tokens();
    chat::ChatOutputParser parser(parser_options);
    chat::ChatMessage reply;
    ReplyPrinter printer(terminal, options.hide_reasoning);
    const auto show = [&](const chat::ChatDelta& delta) {
      reply.append(delta);
      printer.show(delta);
    };
    interrupted = false;
    const auto result = run_streamed(
        core, next_request_id++, std::move(request), [&](std::string_view text) { show(parser.feed(text)); },
        [] { return interrupted.load(); });
    interrupted = false;  // the Ctrl-C that stopped this reply is spent
    show(parser.flush());
    printer.end_reasoning();
    if (result.finish_reason == FinishReason::kAbort && result.error.empty()) {
      print(terminal ? "\x1b[2m [stopped]\x1b[0m" : " [stopped]");
    }
    print("\n");
    if (!result.error.empty()) {
      session.drop_last_message();
      print(fmt::format("(error: {})\n", result.error));
      continue;
    }
    session.add_reply(reply.content);
  }
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto options = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal (its chat template, streamed replies)");
  options->model.add_to(*cmd);
  options->engine.max_num_seqs = 1;  // one conversation: the KV cache holds one sequence of the whole context
  cmd->add_option("--system", options->system_prompt, "System prompt");
  cmd->add_option("--max-tokens", options->max_tokens, "Most tokens a reply (default: until the context is full)")
      ->check(positive());
  cmd->add_flag("--hide-reasoning", options->hide_reasoning,
                "Leave out the model's reasoning (<think>...</think>), shown dimmed otherwise");
  options->sampling.add_to(*cmd);
  options->engine.add_to(*cmd);
  cmd->callback([options] { run_chat(*options); });
}

}  // namespace tern::cli
