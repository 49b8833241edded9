#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/options.h"
#include "core/error.h"
#include "engine/sharded_model.h"
#include "model/layers/sparse_moe.h"
#include "model/safetensors.h"
#include "model/sequence_runner.h"

namespace tern::cli {

void add_logits_command(CLI::App& app) {
  struct Options {
    ModelFlags model;
    std::string prompt_ids;
    std::string out;
    ParallelConfig parallel;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every prompt position to a safetensors file");
  options->model.add_to(*cmd);
  cmd->add_option("--prompt-ids", options->prompt_ids, "Prompt token ids, comma-separated (e.g. 1,2,3)")->required();
  cmd->add_option("--out", options->out, "Output file: one float32 tensor 'logits' of shape [T, vocab]")->required();
  add_parallel_options(*cmd, options->parallel);
  cmd->callback([options] {
    const auto prompt = parse_token_ids(options->prompt_ids);
    auto model = options->model.load(options->parallel);
    if (static_cast<int64_t>(prompt.size()) > model->config().max_position_embeddings) {
      fail("prompt of {} tokens exceeds the model's context of {}", prompt.size(),
           model->config().max_position_embeddings);
    }
    std::vector<int64_t> shape;
    std::vector<float> values;
    model->run_on_ranks([&](int rank) {
      if (model->data_parallel() && rank != 0) {
        // Data-parallel attention: the prompt runs on rank 0; the others compute their experts for its tokens.
        serve_expert_peers(model->model(rank), model->backend(rank));
        return;
      }
      SequenceRunner runner(model->model(rank), model->backend(rank), static_cast<int64_t>(prompt.size()));
      const Tensor logits = runner.append(prompt, true);
      if (rank != 0) return;  // every tensor-parallel rank holds the gathered logits
      shape = logits.shape;
      values = model->backend(rank).to_host_f32(logits);
    });
    write_safetensors_f32(options->out, {{"logits", shape, values}});
  });
}

}  // namespace tern::cli
