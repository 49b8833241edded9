// Which code builds which Hugging Face architecture (config.json's architectures[0]).
#include <functional>
#include <map>

#include "core/error.h"
#include "model/arch/deepseek_mtp.h"
#include "model/arch/deepseek_v4/deepseek_v4_mtp.h"
#include "model/arch/deepseek_v3.h"
#include "model/arch/deepseek_v4/deepseek_v4.h"
#include "model/arch/llama_family.h"
#include "model/arch/sparse_moe_family.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "model/mtp_model.h"

namespace tern {

namespace {

using ModelFactory = std::function<std::unique_ptr<Model>(const ModelConfig&, const Checkpoint&, Backend&)>;

const std::map<std::string, ModelFactory>& registry() {
  static const std::map<std::string, ModelFactory> factories = {
      {"DeepseekV3ForCausalLM", make_deepseek_v3_model},
      {"DeepseekV4ForCausalLM", make_deepseek_v4_model},
      {"GptOssForCausalLM", make_sparse_moe_family_model},
      {"LlamaForCausalLM", make_llama_family_model},
      {"MistralForCausalLM", make_llama_family_model},
      {"MixtralForCausalLM", make_sparse_moe_family_model},
      {"Qwen2ForCausalLM", make_llama_family_model},
      {"Qwen3ForCausalLM", make_llama_family_model},
      {"Qwen3MoeForCausalLM", make_sparse_moe_family_model},
  };
  return factories;
}

}  // namespace

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, Backend& backend, LoadProgress* progress,
                                  OnlineQuantization quantization) {
  const ModelConfig config = ModelConfig::load(dir);
  auto it = registry().find(config.architecture);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [name, factory] : registry()) known += (known.empty() ? "" : ", ") + name;
    fail("{}: unknown architecture '{}' (supported: {})", (dir / "config.json").string(), config.architecture, known);
  }
  const Checkpoint checkpoint = Checkpoint::open(dir, progress, quantization);
  return it->second(config, checkpoint, backend);
}

std::unique_ptr<MtpModel> load_mtp_model(const std::filesystem::path& dir, Backend& backend,
                                         OnlineQuantization quantization) {
  const ModelConfig config = ModelConfig::load(dir);
  if (config.architecture != "DeepseekV3ForCausalLM" && config.architecture != "DeepseekV4ForCausalLM") {
    fail("{}: multi-token prediction (deepseek_mtp) reads DeepSeek-V3 and DeepSeek-V4 checkpoints "
         "(DeepseekV3ForCausalLM, DeepseekV4ForCausalLM), not {}", (dir / "config.json").string(), config.architecture);
  }
  const Checkpoint checkpoint = Checkpoint::open(dir, nullptr, quantization);
  if (config.architecture == "DeepseekV4ForCausalLM") {
    return std::make_unique<DeepseekV4MtpModel>(config, checkpoint, backend);
  }
  return std::make_unique<DeepseekMtpModel>(config, checkpoint, backend);
}

}  // namespace tern
