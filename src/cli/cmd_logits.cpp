#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/options.h"
#include "core/error.h"
#include "engine/sharded_model.h"
#include "model/safetensors.h"
#include "model/sequence_runner.h"

namespace tern::cli {

void add_logits_command(CLI::App& app) {
  struct Options {
    std::string model;
    std::string prompt_ids;
    std::string out;
    int threads = 0;
    std::string backend = "cpu";
    int tensor_parallel_size = 1;
    int expert_parallel_size = 1;
    int64_t num_redundant_experts = 0;
    int decode_context_parallel_size = 1;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every prompt position to a safetensors file");
  cmd->add_option("--model", options->model, "Hugging Face model directory")->required();
  cmd->add_option("--prompt-ids", options->prompt_ids, "Prompt token ids, comma-separated (e.g. 1,2,3)")->required();
  cmd->add_option("--out", options->out, "Output file: one float32 tensor 'logits' of shape [T, vocab]")->required();
  cmd->add_option("--threads", options->threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--backend", options->backend, "cpu or cuda");
  cmd->add_option("--tensor-parallel-size,--tp", options->tensor_parallel_size, "GPUs (or CPU ranks) to split over")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--expert-parallel-size,--ep", options->expert_parallel_size, "1, or the tensor-parallel size: MoE experts split over the ranks instead of replicated on each")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num-redundant-experts", options->num_redundant_experts,
                  "Extra expert slots per MoE layer for replicas (with --ep)")
      ->check(CLI::NonNegativeNumber);
  add_decode_context_parallel_option(*cmd, options->decode_context_parallel_size);
  cmd->callback([options] {
    const auto prompt = parse_token_ids(options->prompt_ids);
    auto model = ShardedModel::load(options->model, options->backend, options->tensor_parallel_size, options->threads,
                                    options->expert_parallel_size, options->num_redundant_experts,
                                    options->decode_context_parallel_size);
    if (static_cast<int64_t>(prompt.size()) > model->config().max_position_embeddings) {
      fail("prompt of {} tokens exceeds the model's context of {}", prompt.size(),
           model->config().max_position_embeddings);
    }
    std::vector<int64_t> shape;
    std::vector<float> values;
    model->run_on_ranks([&](int rank) {
      SequenceRunner runner(model->model(rank), model->backend(rank), static_cast<int64_t>(prompt.size()));
      const Tensor logits = runner.append(prompt, true);
      if (rank != 0) return;  // every rank holds the gathered logits
      shape = logits.shape;
      values = model->backend(rank).to_host_f32(logits);
    });
    write_safetensors_f32(options->out, {{"logits", shape, values}});
  });
}

}  // namespace tern::cli
