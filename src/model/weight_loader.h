#pragma once
// Loads checkpoint tensors onto a backend, checking each name and shape against what the architecture expects.
// Under tensor parallelism (the backend is one rank of a group) the sharded loads give the rank its part:
// Megatron-LM's column-parallel (output rows) and row-parallel (input columns) splits, and a vocab-parallel split
// padded to equal shards.
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "model/block_fp8_weight.h"
#include "model/checkpoint.h"

namespace tern {

struct TensorParallelShard {
  int rank = 0;
  int size = 1;
};

// Rows [begin, begin + count) of checkpoint tensor `name`, whose whole shape is `shape`.
struct RowRange {
  std::string name;
  std::vector<int64_t> shape;
  int64_t begin = 0;
  int64_t count = 0;
};

class WeightLoader {
 public:
  WeightLoader(const Checkpoint& checkpoint, Backend& backend)
      : checkpoint_(checkpoint),
        backend_(backend),
        shard_{backend.tensor_parallel_rank(), backend.tensor_parallel_size()} {}

  Tensor load(const std::string& name, const std::vector<int64_t>& shape);
  // Tensors concatenated along dimension 0, each checked against its own shape (e.g. q, k and v projections).
  Tensor load_concat(const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts);
  std::optional<Tensor> load_optional(const std::string& name, const std::vector<int64_t>& shape);
  bool has(const std::string& name) const { return checkpoint_.has(name); }
  // A scalar the checkpoint stores (shape [] or [1], a float type): nullopt where it has none; fails naming the
  // tensor where it is not one.
  std::optional<float> scalar(const std::string& name) const;
  // The checkpoint tensor itself, for weights that need re-laying out on the host before loading. A block-quantized
  // one, whose elements do not stand alone, comes with its scales on a linear_weights() loader (to be laid out in
  // whole scale blocks) and fails on others (see plain_info).
  const TensorInfo& info(const std::string& name, const std::vector<int64_t>& shape) const;
  // The same with elements that stand alone: a block-quantized weight (on a linear_weights() loader) dequantized to
  // float32 into `storage`, which the result points to. vLLM and SGLang likewise dequantize DeepSeek's kv_b_proj for
  // MLA's absorbed projections.
  TensorInfo plain_info(const std::string& name, const std::vector<int64_t>& shape, std::vector<float>& storage) const;
  Backend& backend() { return backend_; }
  // Loads checkpoint tensors (or host copies laid out anew from them) onto the backend, concatenated along
  // dimension 0, as Backend::load_weight; counts their bytes in the checkpoint's load progress.
  Tensor load_parts(std::span<const TensorInfo* const> parts);
  // MoE experts' weights on a linear_weights() loader (Backend::load_expert_weight), [E * N, K]: each expert's
  // parts (gate and up, say) concatenated, the experts' after each other, each expert's quantization blocks its own.
  Tensor load_expert_concat(const std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>>& experts);
  // The same from a host copy laid out anew, `experts` [E, N, K] (so shaped): under online FP8 each expert's [N, K] is
  // quantized on a grid of its own, as an expert's checkpoint tensor would be (gpt-oss's experts, stored as one
  // [E, in, out] tensor, are transposed on the host first).
  Tensor load_experts(const TensorInfo& experts);

  // A loader of the same checkpoint for the weights of linear layers and experts, which may be block-quantized (FP8
  // with scales): the backend receives them in their format, scales attached (Backend::load_linear_weight), and
  // picks the kernel. The plain loader refuses a quantized tensor, so one where the architecture has no quantized op (an
  // embedding, a norm, a router, a bias, the lm_head) fails at load, naming it. Under online FP8
  // (Checkpoint::quantizes_to_fp8) this loader's 2-D BF16, F16 and F32 tensors reach the backend as block FP8
  // (BlockFp8Weight), each quantized whole, once, so that shards keep the whole weight's grid as a checkpoint's do;
  // so do DeepSeek-V4's FP4 experts (Checkpoint::repacks_fp4_to_fp8).
  WeightLoader linear_weights() const;
  // The same for weights that may be quantized but that Backend::grouped_linear multiplies (DeepSeek-V4's grouped
  // output projection): the backend receives them through Backend::load_weight.
  WeightLoader grouped_weights() const;

  const TensorParallelShard& shard() const { return shard_; }
  // A loader of the same checkpoint whose sharded loads give whole tensors: for layers whose weights every rank
  // holds (attention under decode context parallelism).
  WeightLoader replicated() const {
    WeightLoader whole(*this);
    whole.shard_ = {};
    return whole;
  }
  // `count` items split evenly over the ranks: this rank's share; fails naming `what` unless it divides.
  int64_t shard_count(int64_t count, const std::string& what) const;
  // This rank's rows (dimension 0) of each part, concatenated: a column-parallel linear's weight or bias.
  Tensor load_row_shards(const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts);
  // This rank's even share of dimension 0 of `name`, as a range for load_row_ranges.
  RowRange row_shard(const std::string& name, const std::vector<int64_t>& shape) const;
  // The given rows of each part, concatenated (shards that are not an even split, e.g. replicated KV heads).
  Tensor load_row_ranges(const std::vector<RowRange>& parts);
  // This rank's columns (dimension 1) of a 2-D tensor: a row-parallel linear's weight.
  Tensor load_column_shard(const std::string& name, const std::vector<int64_t>& shape);
  // This rank's rows of a [vocab, hidden] tensor split into shards of vocab_shard_rows(vocab) rows, the last
  // padded with zero rows.
  Tensor load_vocab_shard(const std::string& name, const std::vector<int64_t>& shape);
  int64_t vocab_shard_rows(int64_t vocab) const { return (vocab + shard_.size - 1) / shard_.size; }

 private:
  using Fp8Weights = std::unordered_map<std::string, std::unique_ptr<BlockFp8Weight>>;

  // The checkpoint tensor, or its online FP8 quantization on a linear_weights() loader under online FP8 (an FP4
  // expert's repacking, Checkpoint::repacks_fp4_to_fp8).
  const TensorInfo& tensor(const std::string& name, const std::vector<int64_t>& shape) const;
  // The bytes of checkpoint tensors `part` loads, for the load progress: an online-quantized part's elements as the
  // checkpoint stores them.
  int64_t checkpoint_bytes(const TensorInfo& part) const;
  // load_parts for `experts` runs of parts (Backend::load_expert_weight), or for a weight of one grid (0).
  Tensor load_parts(std::span<const TensorInfo* const> parts, int64_t experts);

  const Checkpoint& checkpoint_;
  Backend& backend_;
  TensorParallelShard shard_;
  bool takes_quantized_ = false;
  bool loads_linear_weights_ = false;  // linear_weights(): Backend::load_linear_weight
  // By name, the weights this linear loader (and its copies) quantized to FP8; they live as long as it, one layer's
  // loading, since tensors and views of them handed out point into them. Null unless under online FP8.
  std::shared_ptr<Fp8Weights> fp8_weights_;
};

}  // namespace tern
