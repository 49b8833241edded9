#include "cli/commands.h"
#include "cli/run.h"

int main(int argc, char** argv) {
  CLI::App app{"tern: LLM inference and serving engine", "tern"};
  app.require_subcommand(1);
  tern::cli::add_generate_command(app);
  tern::cli::add_chat_command(app);
  tern::cli::add_logits_command(app);
  tern::cli::add_perplexity_command(app);
  tern::cli::add_bench_command(app);
  tern::cli::add_tokenize_command(app);
  tern::cli::add_bench_tokenizer_command(app);
  tern::cli::add_bench_grammar_command(app);
  tern::cli::add_render_chat_command(app);
  tern::cli::add_serve_command(app);
  tern::cli::add_gateway_command(app);
  tern::cli::add_convert_deepseek_v4_command(app);
  return tern::cli::run(app, argc, argv);
}
