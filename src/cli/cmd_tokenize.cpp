#include <cstdio>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tern::cli {

void add_tokenize_command(CLI::App& app) {
  struct Options {
    std::string tokenizer;
    bool add_special_tokens = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize", "Encode texts: reads a JSON array of strings on stdin, prints a JSON array of token-id arrays");
  cmd->add_option("--tokenizer", options->tokenizer, "Directory with tokenizer.json (and tokenizer_config.json)")
      ->required();
  cmd->add_flag("--add-special-tokens", options->add_special_tokens,
                "Add the BOS/EOS tokens the tokenizer's post-processor asks for (off by default)");
  cmd->callback([options] {
    const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    const nlohmann::json texts = nlohmann::json::parse(input, nullptr, /*allow_exceptions=*/false);
    if (texts.is_discarded()) fail("tokenize: stdin is not valid JSON (expected an array of strings)");
    if (!texts.is_array()) fail("tokenize: stdin must be a JSON array of strings, got a JSON {}", texts.type_name());
    for (std::size_t i = 0; i < texts.size(); ++i) {
      if (!texts[i].is_string()) fail("tokenize: element {} of the input array is a {}, not a string", i, texts[i].type_name());
    }
    const Tokenizer tokenizer = Tokenizer::load(options->tokenizer);
    nlohmann::json result = nlohmann::json::array();
    for (const auto& text : texts) result.push_back(tokenizer.encode(text.get_ref<const std::string&>(), options->add_special_tokens));
    std::printf("%s\n", result.dump().c_str());
  });
}

}  // namespace tern::cli
