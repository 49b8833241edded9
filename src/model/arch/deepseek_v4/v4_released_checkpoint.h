#pragma once
// Writes a DeepSeek-V4 checkpoint in DeepSeek's released layout (deepseek-ai/DeepSeek-V4-Flash and -Pro) from one
// that transformers wrote in bf16 (or f16 / f32): what `tern convert-deepseek-v4` does, so that the loader of the
// released layout is tested on the CPU without DeepSeek's multi-hundred-GB files. The released layout:
//   - names: v4_checkpoint_names.h (embed.weight, layers.<i>.attn.kv_norm.weight, ...);
//   - the attention projections (wq_a, wq_b, wkv, wo_a, wo_b, indexer.wq_b) and the shared experts (w1, w2, w3):
//     `X.weight` F8_E4M3 in 128x128 blocks with `X.scale` [ceil(out / 128), ceil(in / 128)];
//   - the routed experts, expert_dtype "fp4" (V4-Flash, V4-Pro): `X.weight` I8 [out, in / 2], two e2m1 values a
//     byte, with `X.scale` F8_E8M0 [out, in / 32]; expert_dtype "fp8" (V4-Flash-Base): the 128x128 FP8 blocks;
//   - scales powers of two (ue8m0_quantization.h), stored as F8_E8M0, or as F32 with expert_dtype "fp8" (vLLM's
//     DeepseekV4FP8Config reads the linear scales as e8m0 for "fp4" and float32 for "fp8");
//   - float32: the mHC tensors (hc_*), attn_sink, the compressors' ape, the router's bias; int32: tid2eid
//     (inference/model.py's parameters; vLLM's deepseek_v4.py allocates the hc tensors and sinks in float32); the
//     rest (embeddings, head, norms, router weights, compressors, indexer weights_proj) as stored;
//   - config.json as released: compress_ratios (plus one 0 per MTP layer), num_hash_layers, qk_rope_head_dim,
//     rope_theta / compress_rope_theta / rope_scaling, top-level expert_dtype, and quantization_config
//     {quant_method fp8, fmt e4m3, activation_scheme dynamic, weight_block_size [128, 128], scale_fmt ue8m0}.
// Alongside it can write the dequantized twin: the source checkpoint, names and config unchanged, with every
// quantized weight replaced by the bf16 values it dequantizes to (e4m3 or e2m1 code x 2^k holds exactly in bf16;
// a value that would not, beyond bf16's range, fails naming the tensor). Shards are converted one at a time.
#include <filesystem>
#include <optional>

namespace tern {

enum class V4ExpertDtype { fp4, fp8 };

struct V4ReleasedConversion {
  V4ExpertDtype expert_dtype = V4ExpertDtype::fp4;
  std::optional<std::filesystem::path> dequantized_twin;  // where to write the bf16 twin, if anywhere
};

// Reads the transformers-named checkpoint in `source` and writes the released one into `out`, a new or empty
// directory (as is the twin's). Fails naming the file and tensor or config field it cannot convert.
void write_v4_released_checkpoint(const std::filesystem::path& source, const std::filesystem::path& out,
                                  const V4ReleasedConversion& conversion = {});

}  // namespace tern
