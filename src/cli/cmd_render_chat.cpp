// `tern render-chat`: renders a conversation with a model's chat template, as transformers' apply_chat_template.
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "core/error.h"

namespace tern::cli {
namespace {

struct RenderChatOptions {
  std::string tokenizer_dir;
  std::string template_file;
};

void run_render_chat(const RenderChatOptions& options) {
  std::string template_override;
  if (!options.template_file.empty()) {
    std::ifstream in(options.template_file, std::ios::binary);
    if (!in) fail("cannot open template file {}", options.template_file);
    template_override.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (template_override.empty()) fail("template file {} is empty", options.template_file);
  }
  chat::ChatTemplate chat_template = chat::ChatTemplate::from_tokenizer_dir(options.tokenizer_dir, template_override);
  std::string input_text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  auto request = nlohmann::ordered_json::parse(input_text, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) fail("render-chat: standard input is not valid JSON");
  std::string prompt = chat_template.render(chat::ChatTemplateInput::from_request(request));
  std::cout << nlohmann::ordered_json(prompt).dump() << "\n";
}

}  // namespace

void add_render_chat_command(CLI::App& app) {
  auto options = std::make_shared<RenderChatOptions>();
  CLI::App* command = app.add_subcommand("render-chat", "Render a conversation into a prompt with a chat template");
  command->add_option("--tokenizer", options->tokenizer_dir,
                      "Model or tokenizer directory: chat_template, bos_token and eos_token come from its "
                      "tokenizer_config.json (or chat_template.jinja)")
      ->required()
      ->check(CLI::ExistingDirectory);
  command->add_option("--template", options->template_file,
                      "Jinja file to use instead of the directory's chat template")
      ->check(CLI::ExistingFile);
  command->footer(
      "Reads a JSON object on standard input:\n"
      "  {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": true, ...extra template kwargs}\n"
      "(extra keys such as \"enable_thinking\" are passed to the template as variables) and prints the rendered\n"
      "prompt as a JSON string.");
  command->callback([options] { run_render_chat(*options); });
}

}  // namespace tern::cli
