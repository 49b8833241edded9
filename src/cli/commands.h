#pragma once
// Each `tern` subcommand lives in its own cmd_<name>.cpp and registers itself on the top-level app here.
// A command's callback throws tern::Error on bad input; main() prints it and exits non-zero.
#include <CLI/CLI.hpp>

namespace tern::cli {

void add_generate_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_bench_tokenizer_command(CLI::App& app);
void add_bench_grammar_command(CLI::App& app);
void add_render_chat_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_gateway_command(CLI::App& app);
void add_convert_deepseek_v4_command(CLI::App& app);

}  // namespace tern::cli
