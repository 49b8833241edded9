#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "model/arch/deepseek_v4/v4_released_checkpoint.h"

namespace tern::cli {

void add_convert_deepseek_v4_command(CLI::App& app) {
  struct Options {
    std::string model;
    std::string out;
    std::string expert_dtype = "fp4";
    std::string dequantized_twin;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "convert-deepseek-v4",
      "Write a DeepSeek-V4 checkpoint in DeepSeek's released layout (FP8 projections, FP4 or FP8 experts, "
      "power-of-two scales) from one transformers wrote unquantized");
  cmd->add_option("--model", options->model, "Directory of the transformers-named bf16 checkpoint")->required();
  cmd->add_option("--out", options->out, "Directory to write (new or empty)")->required();
  cmd->add_option("--expert-dtype", options->expert_dtype,
                  "Routed experts: fp4 (V4-Flash, V4-Pro: e2m1 with e8m0 scales per 32) or fp8 (V4-Flash-Base: "
                  "128x128 blocks; every scale then float32)")
      ->check(CLI::IsMember({"fp4", "fp8"}));
  cmd->add_option("--dequantized-twin", options->dequantized_twin,
                  "Also write here the source checkpoint with each quantized weight replaced by the bf16 values it "
                  "dequantizes to (new or empty directory)");
  cmd->callback([options] {
    V4ReleasedConversion conversion;
    conversion.expert_dtype = options->expert_dtype == "fp8" ? V4ExpertDtype::fp8 : V4ExpertDtype::fp4;
    if (!options->dequantized_twin.empty()) conversion.dequantized_twin = options->dequantized_twin;
    write_v4_released_checkpoint(options->model, options->out, conversion);
    std::printf("wrote %s\n", options->out.c_str());
  });
}

}  // namespace tern::cli
