#include "backend/cuda/cuda_backend.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "attention/context_parallel.h"
#include "attention/decode_attention.h"
#include "attention/mla_attention.h"
#include "attention/prefill_attention.h"
#include "backend/backend.h"
#include "backend/block_fp8_layout.h"
#include "backend/mxfp4_layout.h"
#include "backend/kv_block_transfer.h"
#include "backend/kv_cache_tensors.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ipc_buffer.h"
#include "backend/cuda/cuda_step.h"
#include "backend/cuda/device_allocator.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kv_tier_copier.h"
#include "backend/cuda/nccl_library.h"
#include "backend/cuda/pinned_ids.h"
#include "backend/cuda/row_exchange.h"
#include "backend/cuda/step_graphs.h"
#include "elementwise/argmax.h"
#include "elementwise/gated_activation.h"
#include "elementwise/pointwise.h"
#include "elementwise/rms_norm.h"
#include "elementwise/rope_kv.h"
#include "elementwise/sample.h"
#include "linear/block_fp8.h"
#include "linear/few_rows_gemm.h"
#include "linear/fp8_gemm.h"
#include "linear/gemv.h"
#include "moe/moe_experts.h"
#include "moe/moe_routing.h"
#include "v4/compressed_kv.h"
#include "v4/hyper_connection.h"
#include "v4/indexer_topk.h"

namespace tern {

bool cuda_device_available() {
  int count = 0;
  const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return ok;
}

namespace {

using cuda::check;
using cuda::launch;
using bf16 = __nv_bfloat16;

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

const cuda::CudaStepContext& cuda_step(const StepContext& step) {
  const auto* ctx = dynamic_cast<const cuda::CudaStepContext*>(&step);
  if (!ctx) fail("cuda backend: the step context was not made by this backend's begin_step");
  return *ctx;
}

// The split-KV plan's fields, which the decode and MLA kernels' params both have, and the decode kernel's choice
// of kernel.
template <typename SplitKvParams>
void set_split_plan(SplitKvParams& p, const cuda::AttentionPlan& plan) {
  p.item_token = plan.item_token;
  p.item_chunk = plan.item_chunk;
  p.num_items = plan.num_items;
  p.num_splits = plan.num_splits;
  p.tokens = plan.decode_tokens;
  p.token_item_begin = plan.token_item_begin;
  p.num_decode_tokens = plan.num_decode_tokens;
  if constexpr (requires { p.all_heads; }) {
    p.all_heads = plan.all_heads;
    p.whole_context = plan.whole_context;
  }
}

int checked_int(int64_t v, const char* what) {
  if (v < 0 || v > INT32_MAX) fail("cuda backend: {} = {} is outside the 32-bit range the kernels index with", what, v);
  return static_cast<int>(v);
}

class CudaBackend final : public Backend {
 public:
  // `group`: the tensor-parallel group whose rank `device` this backend is; null for a group of one.
  explicit CudaBackend(int device, std::shared_ptr<cuda::NcclGroup> group = nullptr)
      : allocator_(std::make_shared<cuda::DeviceAllocator>()), group_(std::move(group)), rank_(device) {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (device < 0 || device >= count) fail("cuda backend: device {} does not exist ({} found)", device, count);
    check(cudaSetDevice(device), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    if (prop.major < 9) {
      fail("cuda backend: device {} ({}) is compute capability {}.{}; this build targets Hopper (sm_90a)", device,
           prop.name, prop.major, prop.minor);
    }
    device_name_ = prop.name;
    compute_capability_ = prop.major * 10 + prop.minor;
    num_sms_ = prop.multiProcessorCount;
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    staging_ = std::make_unique<cuda::PinnedStaging>();
    gemm_workspace_ = allocator_->allocate(DType::I32, {static_cast<int64_t>(kGemmWorkspaceBytes / 4)});
    gemm_ = std::make_unique<cuda::Gemm>(stream_, gemm_workspace_.data, kGemmWorkspaceBytes);
    argmax_workspace_ = allocator_->allocate(DType::I32, {(kernels::ArgmaxWorkspace::bytes + 3) / 4});
    check(cudaMemsetAsync(argmax_workspace_.data, 0, kernels::ArgmaxWorkspace::bytes, stream_), "argmax workspace");
  }

  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    graphs_.reset();
    gemm_.reset();
    staging_.reset();
    cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "cuda-" + device_name_; }
  // sm_90a: the architecture-specific target this build's kernels are compiled for (CMAKE_CUDA_ARCHITECTURES).
  std::string description() const override {
    return fmt::format("cuda ({}, sm_{}{})", device_name_, compute_capability_, compute_capability_ == 90 ? "a" : "");
  }

  // ---- Memory ----

  Tensor load_weight(std::span<const TensorInfo* const> parts) override {
    if (parts.empty()) fail("load_weight: no tensors given");
    const TensorInfo& first = *parts[0];
    std::vector<int64_t> shape = first.shape.empty() ? std::vector<int64_t>{1} : first.shape;
    int64_t rows = 0;
    for (const TensorInfo* part : parts) {
      const std::vector<int64_t> part_shape = part->shape.empty() ? std::vector<int64_t>{1} : part->shape;
      const bool float_types = part->dtype != DType::I32 && first.dtype != DType::I32;
      if ((!float_types && part->dtype != first.dtype) || part_shape.size() != shape.size() ||
          !std::equal(part_shape.begin() + 1, part_shape.end(), shape.begin() + 1)) {
        fail("{}: tensor '{}' cannot be concatenated with '{}' (dtype or trailing shape differs)",
             part->file.string(), part->name, first.name);
      }
      rows += part_shape[0];
    }
    shape[0] = rows;
    // Weights live in bf16 (integers stay as they are): the GEMMs and kernels read bf16. Block-quantized FP8
    // weights and MXFP4 experts are dequantized (code x block scale in float32) and rounded to bf16 here, for now:
    // W16A16 on quantized checkpoints until the FP8 GEMM and FP4 expert kernels take them (docs/quantization.md).
    const DType stored = first.dtype == DType::I32 ? DType::I32 : DType::BF16;
    Tensor out = allocator_->allocate(stored, shape);
    char* dst = out.ptr<char>();
    for (const TensorInfo* part : parts) {
      if (stored == DType::BF16 && part->dtype != DType::BF16) {
        std::vector<float> f32(part->numel());
        dequantize_to_f32(*part, f32.data());
        std::vector<uint16_t> bits(f32.size());
        for (size_t i = 0; i < f32.size(); ++i) bits[i] = f32_to_bf16(f32[i]);
        check(cudaMemcpyAsync(dst, bits.data(), bits.size() * sizeof(uint16_t), cudaMemcpyHostToDevice, stream_),
              "load_weight");
        check(cudaStreamSynchronize(stream_), "load_weight");
        dst += bits.size() * sizeof(uint16_t);
      } else {
        // Straight from the mapped checkpoint: no host copy of the 16 GB of an 8B model.
        check(cudaMemcpyAsync(dst, part->data, part->size_bytes, cudaMemcpyHostToDevice, stream_), "load_weight");
        dst += part->size_bytes;
      }
    }
    check(cudaStreamSynchronize(stream_), "load_weight");
    return out;
  }

  // A block-FP8 weight whose parts fit one 128x128 grid stays FP8 (block_fp8_layout.h): the GEMV reads its codes
  // (W8A16) and prefill's GEMMs run on FP8 tensor cores (W8A8). MXFP4 experts stay as codes too (mxfp4_layout.h):
  // the MoE kernels read them (W4A16). Others are dequantized to bf16 as load_weight does.
  Tensor load_linear_weight(std::span<const TensorInfo* const> parts) override { return load_quantized(parts, 1); }

  // Experts in block FP8 keep a grid of scales each (kernels/moe/moe_experts.h).
  Tensor load_expert_weight(std::span<const TensorInfo* const> parts, int64_t num_experts) override {
    return load_quantized(parts, num_experts);
  }

  // A weight in a format the kernels read as it is, or else dequantized to bf16; `groups` as block_fp8_layout's.
  Tensor load_quantized(std::span<const TensorInfo* const> parts, int64_t groups) {
    if (std::optional<Mxfp4Layout> mxfp4 = mxfp4_layout(parts)) {
      return load_codes(parts, allocator_->allocate(DType::F4_E2M1, {mxfp4->rows, mxfp4->columns}),
                        allocator_->allocate(DType::U8, {mxfp4->rows, mxfp4->scale_columns()}), mxfp4->scales.data());
    }
    const std::optional<BlockFp8Layout> layout = block_fp8_layout(parts, groups);
    if (!layout) return load_weight(parts);
    // Experts' scales [E, ceil(N / 128), stride]: each expert's grid (Tensor::block_scales).
    std::vector<int64_t> scale_shape = {layout->scale_rows(), layout->scale_stride};
    if (groups > 1) scale_shape = {groups, layout->scale_rows() / groups, layout->scale_stride};
    return load_codes(parts, allocator_->allocate(DType::F8_E4M3, {layout->rows, layout->columns}),
                      allocator_->allocate(DType::F32, std::move(scale_shape)), layout->scales.data());
  }

  // The parts' codes as stored into `codes` ([rows, columns]: the caller reshapes experts to [E, N, K]), with the
  // layout's scales (scales.bytes() of them at host_scales) copied into `scales`, attached as its block_scales.
  Tensor load_codes(std::span<const TensorInfo* const> parts, Tensor codes, Tensor scales, const void* host_scales) {
    char* dst = codes.ptr<char>();
    for (const TensorInfo* part : parts) {
      check(cudaMemcpyAsync(dst, part->data, part->size_bytes, cudaMemcpyHostToDevice, stream_), "load_linear_weight");
      dst += part->size_bytes;
    }
    check(cudaMemcpyAsync(scales.data, host_scales, scales.bytes(), cudaMemcpyHostToDevice, stream_),
          "load_linear_weight (scales)");
    check(cudaStreamSynchronize(stream_), "load_linear_weight");
    codes.block_scales = std::make_shared<const Tensor>(std::move(scales));
    return codes;
  }

  Tensor from_host_f32(std::span<const float> values, std::vector<int64_t> shape) override {
    Tensor out = allocator_->allocate(DType::F32, std::move(shape));
    if (static_cast<size_t>(out.numel()) != values.size()) fail("from_host_f32: shape does not match value count");
    if (values.empty()) return out;  // nothing to copy, no stream sync
    check(cudaMemcpyAsync(out.data, values.data(), values.size_bytes(), cudaMemcpyHostToDevice, stream_),
          "from_host_f32");
    check(cudaStreamSynchronize(stream_), "from_host_f32");
    return out;
  }

  std::vector<float> to_host_f32(const Tensor& t) override {
    std::vector<char> raw(t.bytes());
    copy_to_host(t, raw.data());
    std::vector<float> out(t.numel());
    if (!t.block_scales) {
      convert_to_f32(t.dtype, raw.data(), out.data(), out.size());
    } else if (t.dtype == DType::F4_E2M1) {  // codes times their group's scale, exactly
      std::vector<char> scale_bytes(t.block_scales->bytes());
      copy_to_host(*t.block_scales, scale_bytes.data());
      const TensorInfo scales{"MXFP4 scales", {}, DType::F8_E8M0, t.block_scales->shape,
                              reinterpret_cast<const std::byte*>(scale_bytes.data()), scale_bytes.size(), std::nullopt};
      const TensorInfo codes{"MXFP4 weight", {}, t.dtype, t.shape, reinterpret_cast<const std::byte*>(raw.data()),
                             raw.size(), BlockScales{&scales, 1, Mxfp4Layout::kGroup}};
      dequantize_to_f32(codes, out.data());
    } else {  // codes times their block's scale, exactly, as a checkpoint's are dequantized; experts' on their grids
      const std::vector<float> scale_values = to_host_f32(*t.block_scales);
      const int64_t groups = t.experts_own_grids() ? t.block_scales->size(0) : 1;
      const int64_t rows = t.numel() / t.size(-1) / groups;
      const int64_t stride = t.block_scales->size(-1);
      const int64_t group_scales = static_cast<int64_t>(scale_values.size()) / groups;
      for (int64_t g = 0; g < groups; ++g) {
        const TensorInfo scales{"block scales", {}, DType::F32, {group_scales / stride, stride},
                                reinterpret_cast<const std::byte*>(scale_values.data() + g * group_scales),
                                static_cast<size_t>(group_scales) * sizeof(float), std::nullopt};
        const size_t code_bytes = static_cast<size_t>(rows * t.size(-1));
        const TensorInfo codes{"block-FP8 weight", {}, t.dtype, {rows, t.size(-1)},
                               reinterpret_cast<const std::byte*>(raw.data() + g * code_bytes), code_bytes,
                               BlockScales{&scales, BlockFp8Layout::kBlock, BlockFp8Layout::kBlock}};
        dequantize_to_f32(codes, out.data() + g * rows * t.size(-1));
      }
    }
    return out;
  }

  std::vector<int32_t> to_host_i32(const Tensor& t) override {
    if (t.dtype != DType::I32) fail("to_host_i32: tensor is {}", dtype_name(t.dtype));
    std::vector<int32_t> out(t.numel());
    copy_to_host(t, out.data());
    return out;
  }

  std::unique_ptr<PendingIds> to_host_i32_async(const Tensor& t) override { return pinned_ids_->copy(t, stream_); }

  // bf16, or for --kv-cache-dtype fp8_e4m3 e4m3 codes, which the attention kernels (GQA prefill and split-KV, MLA,
  // DeepSeek-V4's compressed attention) convert as they read them, in blocks of a multiple of 16 tokens (the
  // tensor-core split-KV kernel's pages). DeepSeek-V4's compressed entries stay float32 layer state.
  static DType kv_element_type(const std::vector<KvLayerSpec>& layers, int64_t block_size, KvCacheDtype dtype) {
    if (dtype == KvCacheDtype::automatic) return DType::BF16;
    const char* flag = kv_cache_dtype_name(dtype);
    if (block_size % kernels::kDecodePageKeys != 0) {
      fail("--kv-cache-dtype {}: the CUDA backend reads FP8 KV caches in blocks of a multiple of {} tokens, not {}",
           flag, kernels::kDecodePageKeys, block_size);
    }
    for (size_t i = 0; i < layers.size(); ++i) {
      const KvLayerSpec& layer = layers[i];
      // Keys only (MLA's latent, DeepSeek-V4's K = V) or values as wide as keys.
      if (layer.value_dim != 0 && layer.key_dim != layer.value_dim) {
        fail("--kv-cache-dtype {}: layer {} has keys of {} and values of {} dims; the CUDA backend's FP8 attention "
             "reads values as wide as keys; use --kv-cache-dtype auto", flag, i, layer.key_dim, layer.value_dim);
      }
    }
    return DType::F8_E4M3;
  }

  KvCache allocate_kv_cache(const std::vector<KvLayerSpec>& layers, int64_t num_blocks, int64_t block_size,
                            KvCacheDtype dtype) override {
    const DType element = kv_element_type(layers, block_size, dtype);
    if (element == DType::F8_E4M3) decode_layers_.all_heads = false;
    for (const auto& layer : layers) {
      const int heads = layer.kind == KvLayerKind::mla_latent ? kernels::kMlaDecodeSplitHeads
                                                              : static_cast<int>(layer.num_kv_heads);
      decode_layers_.num_kv_heads = std::max(decode_layers_.num_kv_heads, heads);
      const bool per_kv_head = layer.kind == KvLayerKind::full || layer.kind == KvLayerKind::sliding_window;
      decode_layers_.whole_context =
          decode_layers_.whole_context && per_kv_head &&
          kernels::decode_attention_whole_context_supports(layer.key_dim, layer.value_dim, block_size);
    }
    KvCache cache = allocate_kv_cache_tensors(layers, num_blocks, block_size, element,
                                              [&](DType dtype, std::vector<int64_t> shape) {
                                                return zeros(dtype, std::move(shape));
                                              });
    cache.dtype = dtype;
    cache.context_shard = kv_context_shard();
    return cache;
  }

  KvCache allocate_host_kv_cache(const std::vector<KvLayerSpec>& layers, int64_t num_blocks, int64_t block_size,
                                 KvCacheDtype dtype) override {
    KvCache cache = allocate_kv_cache_tensors(layers, num_blocks, block_size, kv_element_type(layers, block_size, dtype),
                                              cuda::KvTierCopier::pinned_zeros);
    cache.dtype = dtype;
    cache.context_shard = kv_context_shard();
    return cache;
  }

  void copy_kv_blocks(const KvCache& from, std::span<const int32_t> from_blocks, KvCache& to,
                      std::span<const int32_t> to_blocks) override {
    tier_copier().copy(from, from_blocks, to, to_blocks);
  }

  void wait_kv_copies() override {
    if (tier_copier_) tier_copier_->wait();
  }

  double kv_copy_seconds() override { return tier_copier_ ? tier_copier_->seconds() : 0.0; }

  // Payloads in host memory or in a shared buffer (this GPU's or, opened, another's: cudaMemcpyDefault makes that
  // a peer copy). A host payload to import is staged in pinned memory first, so its many small segment copies
  // queue back to back instead of each waiting for a pageable transfer.
  void export_kv_blocks_to(const KvCache& cache, std::span<const int32_t> blocks, void* payload) override {
    if (tier_copier_) tier_copier_->await_all();
    copy_kv_blocks_out(cache, blocks, payload, [&](const void* memory, void* out, size_t bytes) {
      check(cudaMemcpyAsync(out, memory, bytes, cudaMemcpyDefault, stream_), "export_kv_blocks");
    });
    check(cudaStreamSynchronize(stream_), "export_kv_blocks");
  }

  void import_kv_blocks_from(KvCache& cache, std::span<const int32_t> blocks, const KvPayloadView& payload) override {
    cudaPointerAttributes where{};
    check(cudaPointerGetAttributes(&where, payload.data), "import_kv_blocks: cudaPointerGetAttributes");
    const size_t bytes = kv_payload_bytes(cache, static_cast<size_t>(payload.num_blocks));
    void* pinned = nullptr;
    if (where.type == cudaMemoryTypeUnregistered) {
      check(cudaMallocHost(&pinned, bytes), "import_kv_blocks: pinned staging buffer");
      std::memcpy(pinned, payload.data, bytes);
    }
    KvPayloadView source = payload;
    if (pinned) source.data = pinned;
    if (tier_copier_) tier_copier_->await_all();
    try {
      copy_kv_blocks_in(cache, blocks, source, [&](void* memory, const void* in, size_t n) {
        check(cudaMemcpyAsync(memory, in, n, cudaMemcpyDefault, stream_), "import_kv_blocks");
      });
      check(cudaStreamSynchronize(stream_), "import_kv_blocks");
    } catch (...) {
      cudaStreamSynchronize(stream_);
      cudaFreeHost(pinned);
      throw;
    }
    cudaFreeHost(pinned);
  }

  std::unique_ptr<SharedBuffer> create_shared_buffer(size_t bytes) override { return cuda::create_ipc_buffer(bytes); }
  std::unique_ptr<SharedBuffer> open_shared_buffer(std::span<const uint8_t> handle) override {
    return cuda::open_ipc_buffer(handle);
  }

  std::unique_ptr<StepContext> begin_step(const ForwardBatch& batch) override {
    return std::make_unique<cuda::CudaStepContext>(batch, *allocator_, *staging_, stream_, num_sms_,
                                                   decode_layers_);
  }

  std::optional<DeviceMemory> device_memory() override {
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return DeviceMemory{static_cast<int64_t>(free), static_cast<int64_t>(total)};
  }

  // Data-parallel steps run eagerly: their MoE layers read the routed ids and the all-to-all counts back to the
  // host (row_exchange.h), which a recorded graph cannot do, and a graph would replay one step's dispatch.
  std::optional<StepOutputs> run_recorded_step(const ForwardBatch& batch, const StepForward& forward,
                                               uint64_t recorder = 0) override {
    if (data_parallel()) return std::nullopt;
    // A capture cannot wait for events recorded outside it.
    if (tier_copier_) tier_copier_->await_all();
    if (!graphs_) graphs_ = std::make_unique<cuda::StepGraphs>(*allocator_, stream_);
    return graphs_->run(
        batch,
        [&](const cuda::FixedMetadata& fixed) {
          return std::make_unique<cuda::CudaStepContext>(batch, *allocator_, *staging_, stream_, num_sms_,
                                                         decode_layers_, &fixed);
        },
        forward, recorder);
  }

  int32_t max_recorded_chunk_tokens() const override { return cuda::kDecodeMaxNewTokens; }

  void discard_recorded_steps(std::optional<uint64_t> recorder = std::nullopt) override {
    if (!recorder) graphs_.reset();
    else if (graphs_) graphs_->discard(*recorder);
  }

  // ---- Ops ----

  Tensor embedding(const Tensor& table, const StepContext& step, const VocabShard& shard) override {
    const auto& ctx = cuda_step(step);
    const auto& ids = step.batch().token_ids;
    if (table.shape.size() != 2) fail("embedding: table must be [vocab, hidden], got {}", shape_string(table.shape));
    const int64_t vocab = shard.vocab_size > 0 ? shard.vocab_size : table.size(0);
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab) fail("token id {} is outside the vocabulary of {}", id, vocab);
    }
    const Tensor weights = activation(table, "embedding");
    Tensor out = allocator_->allocate(DType::BF16, {static_cast<int64_t>(ids.size()), table.size(1)});
    launch("embedding", [&] {
      kernels::launch_gather_rows(weights.data, ctx.token_ids(), out.data, out.size(0),
                                  table.size(1) * sizeof(bf16), stream_, {shard.first_id, table.size(0)});
    });
    return out;
  }

  DType activation_dtype() const override { return DType::BF16; }

  int group_rank() const override { return group_ ? rank_ : 0; }
  int group_size() const override { return group_ ? group_->size() : 1; }

  void all_reduce_sum(Tensor& x) override {
    if (!group_) return;
    group_->library().check(group_->library().all_reduce(x.data, x.data, static_cast<size_t>(x.numel()),
                                                         nccl_type(x, "all_reduce_sum"), ncclSum,
                                                         group_->comm(rank_), stream_),
                            "ncclAllReduce");
  }

  Tensor all_gather_columns(const Tensor& x, int64_t num_columns) override {
    if (!group_) return Backend::all_gather_columns(x, num_columns);
    const int64_t columns = x.size(-1);
    const int64_t rows = columns ? x.numel() / columns : 0;
    const size_t element = dtype_size(x.dtype);
    // NCCL gathers whole buffers rank after rank ([size, rows, columns]); the shards then move into their columns.
    Tensor gathered = allocator_->allocate(x.dtype, {group_->size(), rows, columns});
    group_->library().check(group_->library().all_gather(x.data, gathered.data, static_cast<size_t>(x.numel()),
                                                         nccl_type(x, "all_gather_columns"), group_->comm(rank_),
                                                         stream_),
                            "ncclAllGather");
    Tensor out = allocator_->allocate(x.dtype, {rows, num_columns});
    for (int r = 0; r < group_->size(); ++r) {
      const int64_t width = std::clamp<int64_t>(num_columns - r * columns, 0, columns);
      if (width == 0 || rows == 0) continue;
      check(cudaMemcpy2DAsync(out.ptr<char>() + r * columns * element, num_columns * element,
                              gathered.ptr<char>() + r * rows * columns * element, columns * element, width * element,
                              rows, cudaMemcpyDeviceToDevice, stream_),
            "all_gather_columns");
    }
    return out;
  }

  Tensor all_to_all_rows(const Tensor& x, std::span<const int64_t> send_counts,
                         std::vector<int64_t>& received_counts) override {
    if (!group_) fail("all_to_all_rows: the cuda backend is not part of a group");
    return cuda::all_to_all_rows(rank_stream(), *group_, rank_, x, send_counts, received_counts);
  }

  Tensor select_rows(const Tensor& x, std::span<const int32_t> rows) override {
    return cuda::select_rows(rank_stream(), x, rows);
  }

  void select_rows_into(const Tensor& x, std::span<const int32_t> rows, Tensor& out) override {
    cuda::select_rows_into(rank_stream(), x, rows, out);
  }

  void add_rows(Tensor& out, const Tensor& x, std::span<const int32_t> targets) override {
    cuda::add_rows(rank_stream(), out, x, targets);
  }

  Tensor rms_norm(const Tensor& x, const Tensor& weight, float eps) override {
    const Tensor in = activation(x, "rms_norm");
    Tensor out = allocator_->allocate(DType::BF16, x.shape);
    norm(in, nullptr, weight, eps, out, "rms_norm");
    return out;
  }

  Tensor add_rms_norm(Tensor& residual, const Tensor& x, const Tensor& weight, float eps) override {
    require_bf16(residual, "add_rms_norm (residual)");
    if (residual.numel() != x.numel()) fail("add_rms_norm: {} vs {} elements", residual.numel(), x.numel());
    const Tensor in = activation(x, "add_rms_norm");
    Tensor out = allocator_->allocate(DType::BF16, residual.shape);
    norm(in, &residual, weight, eps, out, "add_rms_norm");
    return out;
  }

  Tensor linear(const Tensor& x, const Tensor& weight, const Tensor* bias) override {
    return linear_to(x, weight, bias, DType::BF16);
  }

  // At batch 1, one GEMV that adds and normalizes its input, instead of a norm kernel and a GEMV.
  Tensor norm_linear(PreNorm& input, const Tensor& weight, const Tensor* bias) override {
    std::optional<PreNormGemv> gemv = pre_norm_gemv(input, weight, bias);
    if (!gemv) return Backend::norm_linear(input, weight, bias);
    Tensor out = allocator_->allocate(DType::BF16, {1, weight.size(0)});
    gemv->params.out = out.ptr<bf16>();
    run(*gemv, input, "norm_linear (gemv)");
    return out;
  }

  // The same GEMV with SiLU-and-mul in its epilogue.
  Tensor norm_linear_silu_mul(PreNorm& input, const Tensor& gate_up_weight) override {
    std::optional<PreNormGemv> gemv = pre_norm_gemv(input, gate_up_weight, nullptr);
    if (!gemv || !kernels::gemv_supports_silu_mul(gate_up_weight.size(0))) {
      return Backend::norm_linear_silu_mul(input, gate_up_weight);
    }
    Tensor out = allocator_->allocate(DType::BF16, {1, gate_up_weight.size(0) / 2});
    gemv->params.out = out.ptr<bf16>();
    gemv->params.output = kernels::GemvOutput::silu_mul;
    gemv->params.trigger_at_end = true;  // the down projection's GEMV comes next
    run(*gemv, input, "norm_linear_silu_mul (gemv)");
    return out;
  }

  // The same GEMV with RoPE and the cache write in its epilogue, for whole-head rotate-half RoPE without head norms
  // (a head's norm needs all of its dims, which different blocks of the GEMV compute: the GEMV with the input's norm,
  // then rope_store_qkv's kernel).
  Tensor norm_linear_rope_store_kv(PreNorm& input, const Tensor& qkv_weight, const Tensor* qkv_bias,
                                   const QkvHeads& heads, const RopeTable& table, KvCache& cache, int layer,
                                   const StepContext& step) override {
    await_kv_layer(layer);
    std::optional<PreNormGemv> gemv = pre_norm_gemv(input, qkv_weight, qkv_bias);
    const int64_t q_width = heads.num_heads * heads.head_dim;
    const kernels::RopeSpec spec = rope_spec(table, heads.head_dim, false);
    const bool fits = gemv && !heads.norms.query && layer >= 0 && layer < static_cast<int>(cache.layers.size()) &&
                      cache.layers[layer].key_dim == heads.head_dim && !table.rotate_last_dims &&
                      kernels::gemv_supports_rope_kv(qkv_weight.size(0), q_width, cache.layers[layer].num_kv_heads,
                                                     heads.head_dim, cache.layers[layer].value_dim, spec);
    if (!fits) return Backend::norm_linear_rope_store_kv(input, qkv_weight, qkv_bias, heads, table, cache, layer, step);
    Tensor qkv = allocator_->allocate(DType::BF16, {1, qkv_weight.size(0)});
    const QkvColumns columns = split_qkv(qkv, heads);  // views of the one row the GEMV writes
    const KvWrite write = kv_write(cache, layer, columns.k, columns.v, step);
    kernels::GemvParams& p = gemv->params;
    p.out = qkv.ptr<bf16>();
    p.output = kernels::GemvOutput::rope_kv;
    p.rope = spec;
    p.kv = write.params;
    p.num_q_rows = checked_int(q_width, "q rows");
    run(*gemv, input, "norm_linear_rope_store_kv (gemv)");
    return columns.q;
  }

  Tensor linear_f32(const Tensor& x, const Tensor& weight, const Tensor* bias) override {
    return linear_to(x, weight, bias, DType::F32);
  }

  // One token: the GEMV of few long rows normalizes as it reads (kernels/linear/gemv.h); more take the ops apart.
  Tensor rms_norm_linear_f32(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& weight) override {
    const int64_t k = x.shape.empty() ? 0 : x.size(-1);
    const bool fits = weight.shape.size() == 2 && weight.size(1) == k && !weight.block_scales &&
                      norm_weight.numel() == k && x.numel() == k &&
                      kernels::skinny_gemv_f32_supports(1, weight.size(0), k);
    if (!fits) return Backend::rms_norm_linear_f32(x, norm_weight, eps, weight);
    const Tensor in = activation(x, "rms_norm_linear_f32");
    const Tensor w = constant(weight, DType::BF16, "rms_norm_linear_f32 (weight)");
    const Tensor g = constant(norm_weight, DType::BF16, "rms_norm_linear_f32 (norm)");
    if (!aligned16(in.data) || !aligned16(w.data) || !aligned16(g.data)) {
      return Backend::rms_norm_linear_f32(x, norm_weight, eps, weight);
    }
    Tensor out = allocator_->allocate(DType::F32, {1, weight.size(0)});
    launch("rms_norm_linear_f32", [&] {
      kernels::launch_skinny_gemv_f32(in.ptr<bf16>(), w.ptr<bf16>(), out.ptr<float>(),
                                      static_cast<int>(weight.size(0)), static_cast<int>(k), stream_, g.ptr<bf16>(),
                                      eps);
    });
    return out;
  }

  // Partial products are summed in float32 and rounded to bf16 once, as one GPU's GEMM would round them: summing
  // bf16 partials would round three times and drift from the unsharded model.
  Tensor linear_all_reduce(const Tensor& x, const Tensor& weight, const Tensor* bias) override {
    if (!group_) return linear(x, weight, bias);
    Tensor partial = linear_to(x, weight, bias, DType::F32);
    all_reduce_sum(partial);
    Tensor out = allocator_->allocate(DType::BF16, partial.shape);
    launch("linear_all_reduce", [&] {
      kernels::launch_f32_to_bf16(partial.ptr<float>(), out.ptr<bf16>(), out.numel(), stream_);
    });
    return out;
  }

  void add_in_place(Tensor& x, const Tensor& y) override {
    require_bf16(x, "add");
    if (x.numel() != y.numel()) fail("add: {} vs {} elements", x.numel(), y.numel());
    const Tensor other = activation(y, "add");
    launch("add", [&] { kernels::launch_add(x.ptr<bf16>(), other.ptr<bf16>(), x.numel(), stream_); });
  }

  Tensor copy(const Tensor& x) override {
    Tensor out = allocator_->allocate(x.dtype, x.shape);
    const int64_t width = x.shape.empty() ? 1 : x.size(-1);
    const size_t row_bytes = static_cast<size_t>(width) * dtype_size(x.dtype);
    if (out.numel() == 0) return out;
    // A kernel rather than a device-to-device memcpy, which a recorded graph runs on the copy engine more slowly.
    launch("copy", [&] {
      kernels::launch_copy_2d(out.data, row_bytes, x.data, row_bytes, row_bytes, x.numel() / width, stream_);
    });
    return out;
  }

  Tensor slice_columns(const Tensor& x, int64_t begin, int64_t count) override {
    const int64_t width = x.size(-1);
    if (begin < 0 || count < 0 || begin + count > width) {
      fail("slice_columns: [{}, {}) outside {} columns", begin, begin + count, width);
    }
    const int64_t num_rows = width ? x.numel() / width : 0;
    const size_t element = dtype_size(x.dtype);
    // One row's columns are contiguous: a view (at batch 1 the three q/k/v slices of each layer, copied as graph
    // nodes of the copy engine, cost 0.15 ms a step; docs/BENCHMARKS.md).
    if (num_rows == 1) return Tensor{x.dtype, {1, count}, x.ptr<char>() + begin * element, x.storage, nullptr};
    Tensor out = allocator_->allocate(x.dtype, {num_rows, count});
    launch("slice_columns", [&] {
      kernels::launch_copy_2d(out.data, count * element, x.ptr<char>() + begin * element, width * element,
                              count * element, num_rows, stream_);
    });
    return out;
  }

  Tensor concat_columns(const Tensor& a, const Tensor& b) override {
    const int64_t num_rows = a.shape.empty() ? 1 : a.size(0);
    if (a.dtype != b.dtype || (b.shape.empty() ? 1 : b.size(0)) != num_rows) {
      fail("concat_columns: [{}] and [{}] do not share rows and dtype", shape_string(a.shape), shape_string(b.shape));
    }
    const size_t element = dtype_size(a.dtype);
    const int64_t width_a = a.row_numel(), width_b = b.row_numel();
    Tensor out = allocator_->allocate(a.dtype, {num_rows, width_a + width_b});
    const size_t out_pitch = (width_a + width_b) * element;
    for (const auto& [part, width, column] : {std::tuple{&a, width_a, int64_t{0}}, {&b, width_b, width_a}}) {
      launch("concat_columns", [&] {
        kernels::launch_copy_2d(out.ptr<char>() + column * element, out_pitch, part->data, width * element,
                                width * element, num_rows, stream_);
      });
    }
    return out;
  }

  Tensor grouped_linear(const Tensor& x, const Tensor& weight) override {
    if (weight.shape.size() != 3) fail("grouped_linear: weight must be [G, N, K], got {}", shape_string(weight.shape));
    const int64_t groups = weight.size(0), n = weight.size(1), k = weight.size(2);
    if (x.shape.empty() || x.size(-1) != k || groups * k == 0 || x.numel() % (groups * k) != 0) {
      fail("grouped_linear: input of shape {} does not fit {} groups of {} features", shape_string(x.shape), groups, k);
    }
    const int64_t num_tokens = x.numel() / (groups * k);
    const Tensor in = activation(x, "grouped_linear");
    const Tensor w = constant(weight, DType::BF16, "grouped_linear (weight)");
    Tensor out = allocator_->allocate(DType::BF16, {num_tokens, groups, n});
    gemm_->run_grouped(in.data, w.data, out.data, num_tokens, n, k, groups);
    return out;
  }

  Tensor silu_mul(const Tensor& gate_up) override {
    const Tensor in = activation(gate_up, "silu_mul");
    const int64_t width = gate_up.size(-1) / 2;
    if (gate_up.size(-1) % 2 != 0) fail("silu_mul: width {} is odd", gate_up.size(-1));
    const int64_t num_rows = width ? gate_up.numel() / (2 * width) : 0;
    Tensor out = allocator_->allocate(DType::BF16, {num_rows, width});
    launch("silu_mul", [&] { kernels::launch_silu_mul(in.ptr<bf16>(), out.ptr<bf16>(), num_rows, width, stream_); });
    return out;
  }

  Tensor gated_activation(const Tensor& gate_up, const GluActivation& activation) override {
    const Tensor in = this->activation(gate_up, "gated_activation");
    if (gate_up.size(-1) % 2 != 0) fail("gated_activation: width {} is odd", gate_up.size(-1));
    const int64_t width = gate_up.size(-1) / 2;
    const int64_t num_rows = width ? gate_up.numel() / (2 * width) : 0;
    Tensor out = allocator_->allocate(DType::BF16, {num_rows, width});
    launch("gated_activation", [&] {
      kernels::launch_gated_activation(in.ptr<bf16>(), out.ptr<bf16>(), num_rows, width, gated_spec(activation),
                                       stream_);
    });
    return out;
  }

  ExpertRouting route_experts(const Tensor& logits, const RouterParams& params, const StepContext& step) override {
    if (logits.shape.empty()) fail("route_experts: logits have no dimensions");
    const int64_t num_experts = logits.size(-1);
    const int64_t num_tokens = num_experts ? logits.numel() / num_experts : 0;
    const Tensor scores = f32(logits, "route_experts");
    kernels::RouterKernelParams p;
    p.logits = scores.ptr<float>();
    p.num_tokens = checked_int(num_tokens, "tokens");
    p.num_experts = checked_int(num_experts, "experts");
    p.top_k = checked_int(params.top_k, "top_k");
    p.scoring = params.scoring == RouterScoring::softmax   ? kernels::RouterScoringKind::softmax
                : params.scoring == RouterScoring::sigmoid ? kernels::RouterScoringKind::sigmoid
                                                           : kernels::RouterScoringKind::sqrt_softplus;
    p.normalize = params.normalize;
    p.routed_scaling = params.routed_scaling;
    p.num_groups = checked_int(params.num_groups, "expert groups");
    p.top_k_groups = checked_int(params.top_k_groups, "chosen expert groups");
    std::optional<Tensor> bias;
    if (params.selection_bias) {
      if (params.selection_bias->numel() != num_experts) fail("route_experts: selection bias size differs from experts");
      bias = constant(*params.selection_bias, DType::F32, "route_experts (selection bias)");
      p.selection_bias = bias->ptr<float>();
    }
    if (params.token_expert_table) {
      const Tensor& table = *params.token_expert_table;
      if (table.dtype != DType::I32 || table.size(-1) != params.top_k) {
        fail("route_experts: the token->expert table must be int32 [vocab, {}]", params.top_k);
      }
      check_tokens(logits, step, "route_experts (hash routing)");
      const int64_t vocab = table.size(0);
      for (const int32_t id : step.batch().token_ids) {
        if (id < 0 || id >= vocab) fail("route_experts: token {} outside the hash table", id);
      }
      p.token_expert_table = table.ptr<int32_t>();
      p.token_ids = cuda_step(step).token_ids();
    }
    const ExpertLoadBalancing& balancing = params.balancing;
    if (balancing.load_counts) {
      if (balancing.load_counts->dtype != DType::I32 || balancing.load_counts->numel() != num_experts) {
        fail("route_experts: load counts must be int32 [{}]", num_experts);
      }
      p.load_counts = reinterpret_cast<uint32_t*>(balancing.load_counts->ptr<int32_t>());
    }
    if ((balancing.replica_slots == nullptr) != (balancing.replica_counts == nullptr)) {
      fail("route_experts: replica slots and replica counts come together");
    }
    if (balancing.replica_slots) {
      const Tensor& slots = *balancing.replica_slots;
      const Tensor& counts = *balancing.replica_counts;
      if (slots.dtype != DType::I32 || slots.shape.size() != 2 || slots.size(0) != num_experts ||
          counts.dtype != DType::I32 || counts.numel() != num_experts) {
        fail("route_experts: replica tables must be int32 [{0}, max_replicas] and [{0}]", num_experts);
      }
      p.replica_slots = slots.ptr<int32_t>();
      p.replica_counts = counts.ptr<int32_t>();
      p.max_replicas = checked_int(slots.size(1), "replicas");
    }
    ExpertRouting routing{allocator_->allocate(DType::I32, {num_tokens, params.top_k}),
                          allocator_->allocate(DType::F32, {num_tokens, params.top_k})};
    p.expert_ids = routing.expert_ids.ptr<int32_t>();
    p.weights = routing.weights.ptr<float>();
    launch("route_experts", [&] { kernels::launch_route_experts(p, stream_); });
    return routing;
  }

  Tensor moe_experts(const Tensor& x, const ExpertRouting& routing, const ExpertWeights& experts,
                     const GluActivation& activation) override {
    const auto [num_experts, hidden, intermediate, num_tokens, top_k] = moe_shape(x, routing, experts);
    const Tensor in = this->activation(x, "moe_experts");
    // Block-FP8 and MXFP4 experts stay as codes: the kernels read them.
    const Tensor gate_up_weight =
        experts.gate_up.block_scales ? experts.gate_up : this->activation(experts.gate_up, "moe_experts (gate_up)");
    const Tensor down_weight =
        experts.down.block_scales ? experts.down : this->activation(experts.down, "moe_experts (down)");
    std::optional<Tensor> gate_up_bias, down_bias;
    if (experts.gate_up_bias) gate_up_bias = this->activation(*experts.gate_up_bias, "moe_experts (gate_up bias)");
    if (experts.down_bias) down_bias = this->activation(*experts.down_bias, "moe_experts (down bias)");

    const int64_t num_pairs = num_tokens * top_k;
    if (num_tokens == 1) {
      return token_experts(in, routing, experts.first_expert, intermediate, gate_up_weight, down_weight,
                           gate_up_bias ? &*gate_up_bias : nullptr, down_bias ? &*down_bias : nullptr, activation);
    }
    const int64_t max_tiles = kernels::moe_max_tiles(num_pairs, num_experts);
    const int64_t max_rows = max_tiles * kernels::kMoeTileRows;
    Tensor pair_row = allocator_->allocate(DType::I32, {num_pairs});
    Tensor row_pair = allocator_->allocate(DType::I32, {max_rows});
    Tensor tile_expert = allocator_->allocate(DType::I32, {max_tiles});
    Tensor expert_rows = allocator_->allocate(DType::I32, {num_experts + 1});
    Tensor activated = allocator_->allocate(DType::BF16, {max_rows, intermediate});
    Tensor down = allocator_->allocate(DType::BF16, {max_rows, hidden});
    Tensor out = allocator_->allocate(DType::BF16, {num_tokens, hidden});
    if (num_tokens == 0) return out;
    const kernels::MoeGrouping grouping{pair_row.ptr<int32_t>(), row_pair.ptr<int32_t>(), tile_expert.ptr<int32_t>(),
                                        expert_rows.ptr<int32_t>()};
    launch("moe_experts (grouping)", [&] {
      kernels::launch_moe_group_pairs(routing.expert_ids.ptr<int32_t>(), num_pairs,
                                      checked_int(experts.first_expert, "first expert"),
                                      checked_int(num_experts, "experts"), max_tiles, grouping, stream_);
    });
    grouped_gemms(in, grouping, max_tiles, num_pairs, checked_int(top_k, "top_k"), gate_up_weight, down_weight,
                  gate_up_bias ? &*gate_up_bias : nullptr, down_bias ? &*down_bias : nullptr, activation,
                  kernels::moe_few_rows(num_pairs, num_experts), activated, down);
    launch("moe_experts (combine)", [&] {
      kernels::launch_moe_combine(down.ptr<bf16>(), grouping.pair_row, routing.weights.ptr<float>(), out.ptr<bf16>(),
                                  num_tokens, checked_int(top_k, "top_k"), checked_int(hidden, "hidden size"),
                                  stream_);
    });
    return out;
  }

  void rope(Tensor& x, const RopeTable& table, const StepContext& step) override {
    require_bf16(x, "rope");
    if (x.shape.size() != 3) fail("rope: expects [tokens, heads, head_dim], got {}", shape_string(x.shape));
    check_tokens(x, step, "rope");
    rotate(x, rope_spec(table, x.size(2), false), cuda_step(step).positions());
  }

  void rope_inverse(Tensor& x, const RopeTable& table, const StepContext& step) override {
    require_bf16(x, "rope_inverse");
    if (x.shape.size() != 3) fail("rope_inverse: expects [tokens, heads, head_dim], got {}", shape_string(x.shape));
    check_tokens(x, step, "rope_inverse");
    rotate(x, rope_spec(table, x.size(2), true), cuda_step(step).positions());
  }

  // Host positions travel to the device with the call, so a recorded step would replay the recording's positions:
  // steps use rope and rope_inverse, which read the step's positions on the device.
  void rope_at(Tensor& x, const RopeTable& table, std::span<const int32_t> positions, bool inverse) override {
    require_bf16(x, "rope_at");
    if (x.shape.size() != 3) fail("rope_at: expects [tokens, heads, head_dim], got {}", shape_string(x.shape));
    if (static_cast<int64_t>(positions.size()) != x.size(0)) {
      fail("rope_at: {} positions for {} tokens", positions.size(), x.size(0));
    }
    const kernels::RopeSpec spec = rope_spec(table, x.size(2), inverse);
    if (positions.empty()) return;
    Tensor device_positions = allocator_->allocate(DType::I32, {x.size(0)});
    staging_->upload(device_positions.data, positions.data(), positions.size_bytes(), stream_);
    rotate(x, spec, device_positions.ptr<int32_t>());
  }

  void store_kv(KvCache& cache, int layer, const Tensor& key, const Tensor& value, const StepContext& step) override {
    await_kv_layer(layer);
    const KvWrite write = kv_write(cache, layer, key, value, step);
    launch("store_kv", [&] { kernels::launch_store_kv(write.params, stream_); });
  }

  // With head norms, the normalized heads go back to `query` in place: a warp holds its whole head before writing.
  void rope_store_kv(Tensor& query, Tensor& key, const Tensor& value, const HeadNormWeights& norms,
                     const RopeTable& table, KvCache& cache, int layer, const StepContext& step) override {
    if (norms.query && query.size(-1) > kernels::kMaxNormedHeadDim) {
      return Backend::rope_store_kv(query, key, value, norms, table, cache, layer, step);
    }
    await_kv_layer(layer);
    require_bf16(query, "rope_store_kv (query)");
    if (query.shape.size() != 3 || query.size(2) != cache.layers.at(layer).key_dim) {
      fail("rope_store_kv: query {} does not have the cache's key_dim {}", shape_string(query.shape),
           cache.layers.at(layer).key_dim);
    }
    check_tokens(query, step, "rope_store_kv");
    const KvWrite write = kv_write(cache, layer, key, value, step);
    const kernels::RopeSpec spec = rope_spec(table, query.size(2), false);
    const HeadNorms head_norms = this->head_norms(norms, query.size(2), "rope_store_kv");
    launch("rope_store_kv", [&] {
      kernels::launch_rope_store_kv(query.ptr<bf16>(), query.row_numel(), query.ptr<bf16>(),
                                    checked_int(query.size(1), "heads"), write.params, spec, stream_,
                                    head_norms.params);
    });
  }

  // Straight from the projection's rows: with several rows, split_qkv would copy q, k and v out first (three
  // kernels a layer, 7 us of the 250 us a layer of a batch-128 decode step; docs/BENCHMARKS.md); Qwen3's head
  // norms in the same kernel (two more launches a layer otherwise).
  Tensor rope_store_qkv(const Tensor& qkv, const QkvHeads& heads, const RopeTable& table, KvCache& cache, int layer,
                        const StepContext& step) override {
    await_kv_layer(layer);
    const int64_t q_width = heads.num_heads * heads.head_dim;
    const int64_t kv_width = heads.num_kv_heads * heads.head_dim;
    const bool fits = qkv.dtype == DType::BF16 && qkv.shape.size() == 2 && qkv.size(1) == q_width + 2 * kv_width &&
                      layer >= 0 && layer < static_cast<int>(cache.layers.size()) &&
                      cache.layers[layer].num_kv_heads == heads.num_kv_heads &&
                      cache.layers[layer].key_dim == heads.head_dim && cache.layers[layer].value_dim == heads.head_dim;
    if (!fits || (heads.norms.query && heads.head_dim > kernels::kMaxNormedHeadDim)) {
      return Backend::rope_store_qkv(qkv, heads, table, cache, layer, step);
    }
    const HeadNorms norms = head_norms(heads.norms, heads.head_dim, "rope_store_qkv");
    check_tokens(qkv, step, "rope_store_qkv");
    kernels::KvWriteParams p = kv_destination(cache, layer, qkv.size(0), step);
    p.key = qkv.ptr<bf16>() + q_width;
    p.value = qkv.ptr<bf16>() + q_width + kv_width;
    p.key_stride = p.value_stride = qkv.size(1);
    const kernels::RopeSpec spec = rope_spec(table, heads.head_dim, false);
    Tensor query = allocator_->allocate(DType::BF16, {qkv.size(0), heads.num_heads, heads.head_dim});
    launch("rope_store_qkv", [&] {
      kernels::launch_rope_store_kv(qkv.ptr<bf16>(), qkv.size(1), query.ptr<bf16>(),
                                    checked_int(heads.num_heads, "heads"), p, spec, stream_, norms.params);
    });
    return query;
  }

  Tensor attention(const Tensor& query, const KvCache& cache, int layer, const AttentionParams& params,
                   const StepContext& step) override {
    await_kv_layer(layer);
    const auto& ctx = cuda_step(step);
    check_attention_query(query, cache, layer, step, "attention");
    if (cache.context_shard.size > 1) {
      fail("attention: layer {}'s cache holds rank {}'s share of {} (decode context parallelism); its attention is "
           "partial_attention merged over the ranks", layer, cache.context_shard.rank, cache.context_shard.size);
    }
    if (params.values_from_keys > 0) return latent_attention(query, cache, layer, params, ctx);
    const KvLayerSpec& spec = cache.layers[layer];
    check_dense_attention(query, spec);
    ctx.check_block_tables(cache.block_size);
    const Tensor q = activation(query, "attention");
    const int num_tokens = checked_int(query.size(0), "tokens");
    const int num_heads = checked_int(query.size(1), "heads");
    const int head_dim = checked_int(spec.key_dim, "head_dim");
    Tensor out = allocator_->allocate(DType::BF16, {query.size(0), query.size(1), spec.value_dim});
    if (num_tokens == 0) return out;

    const kernels::PagedKv kv = paged_kv(cache, layer, ctx);
    kernels::AttentionBatch batch{ctx.cu_seqlens(), ctx.num_cached(), ctx.token_seq(), ctx.positions()};
    std::optional<Tensor> sinks;
    if (params.sinks) {
      if (params.sinks->numel() != num_heads) fail("attention: {} sinks for {} heads", params.sinks->numel(), num_heads);
      sinks = constant(*params.sinks, DType::F32, "attention (sinks)");
    }
    kernels::AttentionShape shape{num_heads, static_cast<int>(spec.num_kv_heads), head_dim, params.scale,
                                  checked_int(params.sliding_window, "sliding_window"),
                                  sinks ? sinks->ptr<float>() : nullptr};

    const bool with_prefill = kernels::prefill_attention_supports(head_dim);
    const cuda::AttentionPlan& plan = ctx.attention_plan(with_prefill);
    if (plan.num_tiles > 0) {
      kernels::PrefillAttentionParams p;
      p.query = q.ptr<bf16>();
      p.out = out.ptr<bf16>();
      p.kv = kv;
      p.batch = batch;
      p.shape = shape;
      p.tile_seq = plan.tile_seq;
      p.tile_row = plan.tile_row;
      p.num_tiles = plan.num_tiles;
      launch("attention (prefill)", [&] { kernels::launch_prefill_attention(p, stream_); });
    }
    if (plan.num_items > 0) {
      const Tensor partial_out = allocator_->allocate(DType::F32, {plan.num_items, num_heads, head_dim});
      const Tensor partial_lse = allocator_->allocate(DType::F32, {plan.num_items, num_heads});
      kernels::DecodeAttentionParams p;
      p.query = q.ptr<bf16>();
      p.out = out.ptr<bf16>();
      p.kv = kv;
      p.batch = batch;
      p.shape = shape;
      set_split_plan(p, plan);
      p.partial_out = partial_out.ptr<float>();
      p.partial_lse = partial_lse.ptr<float>();
      launch("attention (decode)", [&] { kernels::launch_decode_attention(p, stream_); });
    }
    return out;
  }

  // Every token, prefill chunks included, goes through the split-KV kernels (decode_attention, the MLA kernel's
  // split items): given each query's rank-local position (context_parallel.h) for its causal bound, they read a
  // context shard's cache unchanged, and merge_shares returns the float32 output with its log-sum-exp. The tiled
  // prefill kernels are not used: a prefill chunk costs one pass over its context per query token instead of one
  // per tile of 64 (docs/parallelism.md).
  AttentionPartial partial_attention(const Tensor& query, const KvCache& cache, int layer,
                                     const AttentionParams& params, const StepContext& step) override {
    await_kv_layer(layer);
    const auto& ctx = cuda_step(step);
    check_attention_query(query, cache, layer, step, "partial_attention");
    if (params.sinks) fail("partial_attention: layer {} has attention sinks, which no rank's share of tokens holds", layer);
    if (params.sliding_window > 0) {
      fail("partial_attention: layer {} has a sliding window ({} tokens); the CUDA backend splits the context of "
           "full-attention layers only", layer, params.sliding_window);
    }
    const KvLayerSpec& spec = cache.layers[layer];
    const bool latent = params.values_from_keys > 0;
    if (latent) {
      check_latent_attention(query, spec, layer, params);
    } else {
      check_dense_attention(query, spec);
    }
    const KvContextShard& shard = cache.context_shard;
    ctx.check_block_tables(shard.tokens_per_block(cache.block_size));
    const int64_t num_heads = query.size(1);
    const int64_t value_dim = latent ? params.values_from_keys : spec.value_dim;
    AttentionPartial partial{allocator_->allocate(DType::F32, {query.size(0), num_heads, value_dim}),
                             allocator_->allocate(DType::F32, {query.size(0), num_heads})};
    const int num_tokens = checked_int(query.size(0), "tokens");
    if (num_tokens == 0) return partial;
    const Tensor q = activation(query, "partial_attention");
    Tensor local_positions = allocator_->allocate(DType::I32, {query.size(0)});
    launch("partial_attention (shard positions)", [&] {
      kernels::launch_context_shard_positions(ctx.positions(), local_positions.ptr<int32_t>(), num_tokens, shard.rank,
                                              shard.size, stream_);
    });
    const cuda::AttentionPlan& plan = ctx.attention_plan(false);
    const Tensor partial_out = allocator_->allocate(DType::F32, {plan.num_items, num_heads, value_dim});
    const Tensor partial_lse = allocator_->allocate(DType::F32, {plan.num_items, num_heads});
    const kernels::AttentionBatch batch{ctx.cu_seqlens(), ctx.num_cached(), ctx.token_seq(),
                                        local_positions.ptr<int32_t>()};
    if (latent) {
      kernels::MlaAttentionParams p;
      p.query = q.ptr<bf16>();
      p.kv = paged_kv(cache, layer, ctx);
      p.batch = batch;
      p.num_heads = checked_int(num_heads, "heads");
      p.key_dim = checked_int(spec.key_dim, "key_dim");
      p.value_dim = checked_int(value_dim, "values_from_keys");
      p.scale = params.scale;
      set_split_plan(p, plan);
      p.partial_out = partial_out.ptr<float>();
      p.partial_lse = partial_lse.ptr<float>();
      p.out_f32 = partial.out.ptr<float>();
      p.out_lse = partial.lse.ptr<float>();
      launch("partial_attention (MLA)", [&] { kernels::launch_mla_attention(p, stream_); });
      return partial;
    }
    kernels::DecodeAttentionParams p;
    p.batch_from_host = false;  // its positions are the rank-local ones a kernel of the step writes
    p.query = q.ptr<bf16>();
    p.kv = paged_kv(cache, layer, ctx);
    p.batch = batch;
    p.shape = {checked_int(num_heads, "heads"), static_cast<int>(spec.num_kv_heads),
               checked_int(spec.key_dim, "head_dim"), params.scale, 0, nullptr};
    set_split_plan(p, plan);
    p.partial_out = partial_out.ptr<float>();
    p.partial_lse = partial_lse.ptr<float>();
    p.out_f32 = partial.out.ptr<float>();
    p.out_lse = partial.lse.ptr<float>();
    launch("partial_attention", [&] { kernels::launch_decode_attention(p, stream_); });
    return partial;
  }

  // bf16, as attention's output, for the o_proj (or the MLA value up-projection) that follows.
  Tensor merge_attention_partials(const Tensor& outs, const Tensor& lses) override {
    if (outs.dtype != DType::F32 || lses.dtype != DType::F32 || outs.shape.size() != 4 || lses.shape.size() != 3 ||
        outs.size(0) != lses.size(0) || outs.size(1) != lses.size(1) || outs.size(2) != lses.size(2)) {
      fail("merge_attention_partials: outputs {} {} and log-sum-exps {} {} are not float32 [T, heads, ranks, dim] "
           "and [T, heads, ranks]", dtype_name(outs.dtype), shape_string(outs.shape), dtype_name(lses.dtype),
           shape_string(lses.shape));
    }
    Tensor merged = allocator_->allocate(DType::BF16, {outs.size(0), outs.size(1), outs.size(3)});
    kernels::MergeAttentionPartialsParams p;
    p.outs = outs.ptr<float>();
    p.lses = lses.ptr<float>();
    p.out = merged.ptr<bf16>();
    p.num_rows = checked_int(outs.size(0) * outs.size(1), "rows");
    p.num_ranks = checked_int(outs.size(2), "ranks");
    p.value_dim = checked_int(outs.size(3), "value_dim");
    launch("merge_attention_partials", [&] { kernels::launch_merge_attention_partials(p, stream_); });
    return merged;
  }

  // ---- DeepSeek-V4 (shapes and cache layout in compressed_kv.h) ----

  Tensor hyper_mix(const Tensor& mixes, const Tensor& base, const Tensor& scale,
                   const HyperMixParams& params) override {
    check_hyper_mix(mixes, base, scale, params);
    const int64_t width = mixes.size(-1);
    Tensor out = allocator_->allocate(DType::F32, {mixes.numel() / width, width});
    const MixOperands operands = mix_operands(mixes, base, scale, params, out, "hyper_mix");
    launch("hyper_mix", [&] { kernels::launch_hyper_mix(operands.params, stream_); });
    return out;
  }

  Tensor hyper_collapse(const Tensor& streams, const Tensor& mix) override {
    check_hyper_collapse(streams, mix);
    const int64_t num_tokens = streams.size(0), n = streams.size(1), hidden = streams.size(2);
    const int64_t mix_width = mix.size(-1);
    const Tensor x = activation(streams, "hyper_collapse");
    const Tensor w = f32(mix, "hyper_collapse (mix)");
    Tensor out = allocator_->allocate(DType::BF16, {num_tokens, hidden});
    launch("hyper_collapse", [&] {
      kernels::launch_hyper_collapse(x.ptr<bf16>(), w.ptr<float>(), out.ptr<bf16>(), checked_int(num_tokens, "tokens"),
                                     checked_int(n, "streams"), checked_int(hidden, "hidden size"),
                                     checked_int(mix_width, "mix width"), stream_);
    });
    return out;
  }

  HyperMixed hyper_mix_collapse(const Tensor& streams, const Tensor& mixes, const Tensor& base, const Tensor& scale,
                                const HyperMixParams& params) override {
    check_hyper_mix_collapse(streams, mixes, base, scale, params);
    const int64_t num_tokens = streams.size(0), hidden = streams.size(2);
    const Tensor x = activation(streams, "hyper_mix_collapse");
    HyperMixed out{allocator_->allocate(DType::F32, {num_tokens, mixes.size(-1)}),
                   allocator_->allocate(DType::BF16, {num_tokens, hidden})};
    const MixOperands operands = mix_operands(mixes, base, scale, params, out.mix, "hyper_mix_collapse");
    launch("hyper_mix_collapse", [&] {
      kernels::launch_hyper_mix_collapse(operands.params, x.ptr<bf16>(), out.collapsed.ptr<bf16>(),
                                         checked_int(hidden, "hidden size"), stream_);
    });
    return out;
  }

  Tensor hyper_expand(const Tensor& streams, const Tensor& block_out, const Tensor& mix) override {
    check_hyper_expand(streams, block_out, mix);
    const int64_t num_tokens = streams.size(0), n = streams.size(1), hidden = streams.size(2);
    const Tensor x = activation(streams, "hyper_expand");
    const Tensor y = activation(block_out, "hyper_expand (block output)");
    const Tensor w = f32(mix, "hyper_expand (mix)");
    Tensor out = allocator_->allocate(DType::BF16, streams.shape);
    launch("hyper_expand", [&] {
      kernels::launch_hyper_expand(x.ptr<bf16>(), y.ptr<bf16>(), w.ptr<float>(), out.ptr<bf16>(),
                                   checked_int(num_tokens, "tokens"), checked_int(n, "streams"),
                                   checked_int(hidden, "hidden size"), stream_);
    });
    return out;
  }

  void compress_kv(KvCache& cache, int layer, const Tensor& kv, const Tensor& gate, const CompressorParams& params,
                   const StepContext& step) override {
    await_kv_layer(layer);
    const auto& ctx = cuda_step(step);
    check_compress_kv(kv, gate, params, step.batch().num_tokens());
    const int64_t rate = params.compress_rate, dim = params.entry_dim;
    const Tensor& states = compressed_layer_states(cache, layer, params.state_offset + params.state_dim(), "compress_kv");
    ctx.check_block_tables(cache.block_size);
    const Tensor kv_in = activation(kv, "compress_kv (kv)"), gate_in = activation(gate, "compress_kv (gate)");
    const Tensor bias = activation(*params.position_bias, "compress_kv (position bias)");
    const Tensor norm_weight = activation(*params.norm_weight, "compress_kv (norm)");
    kernels::CompressKvParams p;
    p.kv = kv_in.ptr<bf16>();
    p.gate = gate_in.ptr<bf16>();
    p.position_bias = bias.ptr<bf16>();
    p.norm_weight = norm_weight.ptr<bf16>();
    p.norm_eps = params.norm_eps;
    p.rope = rotary_spec(*params.rope, dim);
    p.states = states.ptr<float>();
    p.state_dim = checked_int(states.size(1), "state dim");
    p.state_offset = checked_int(params.state_offset, "state offset");
    p.compress_rate = checked_int(rate, "compress rate");
    p.entry_dim = checked_int(dim, "entry dim");
    p.overlapping = params.overlapping;
    p.tokens = v4_tokens(ctx, cache, layer);
    launch("compress_kv", [&] { kernels::launch_compress_kv(p, stream_); });
  }

  Tensor select_compressed(const Tensor& query, const Tensor& head_weights, const KvCache& cache, int layer,
                           const IndexerParams& params, const StepContext& step) override {
    await_kv_layer(layer);
    const auto& ctx = cuda_step(step);
    if (query.shape.size() != 3) {
      fail("select_compressed: query must be [T, heads, dim], got {}", shape_string(query.shape));
    }
    check_tokens(query, step, "select_compressed");
    const int64_t num_tokens = query.size(0), num_heads = query.size(1), dim = query.size(2);
    if (head_weights.numel() != num_tokens * num_heads) {
      fail("select_compressed: head weights {} do not fit query {}", shape_string(head_weights.shape),
           shape_string(query.shape));
    }
    if (params.compress_rate <= 0 || params.top_k <= 0) {
      fail("select_compressed: compress rate {} and top_k {} must be positive", params.compress_rate, params.top_k);
    }
    const Tensor& states = compressed_layer_states(cache, layer, params.entry_offset + dim, "select_compressed");
    ctx.check_block_tables(cache.block_size);
    const Tensor q = activation(query, "select_compressed");
    const Tensor w = activation(head_weights, "select_compressed (head weights)");
    Tensor out = allocator_->allocate(DType::I32, {num_tokens, params.top_k});
    kernels::SelectCompressedParams p;
    p.query = q.ptr<bf16>();
    p.head_weights = w.ptr<bf16>();
    p.states = states.ptr<float>();
    p.state_dim = checked_int(states.size(1), "state dim");
    p.entry_offset = checked_int(params.entry_offset, "entry offset");
    p.num_heads = checked_int(num_heads, "indexer heads");
    p.head_dim = checked_int(dim, "indexer head dim");
    p.compress_rate = checked_int(params.compress_rate, "compress rate");
    p.top_k = checked_int(params.top_k, "top_k");
    p.softmax_scale = params.softmax_scale;
    p.weights_scale = params.weights_scale;
    p.selected = out.ptr<int32_t>();
    p.tokens = v4_tokens(ctx, cache, layer);
    // Splits from the token count alone, so that a recorded step replays at any context length; score rows as long
    // as the step's longest context, or while a graph records, as the longest the cache can hold.
    p.num_splits = kernels::indexer_topk_splits(checked_int(num_tokens, "tokens"), num_sms_);
    int64_t longest = 0;
    for (const SequenceChunk& seq : step.batch().sequences) {
      longest = std::max<int64_t>(longest, seq.num_cached_tokens + seq.num_new_tokens);
    }
    if (capturing()) longest = states.size(0) * cache.context_shard.size;
    const int64_t stride = (longest / params.compress_rate + 3) / 4 * 4;
    constexpr int64_t kScoreBytes = int64_t{256} << 20;
    const int64_t rows = std::clamp<int64_t>(kScoreBytes / std::max<int64_t>(1, stride * 4), 1, num_tokens);
    Tensor scores = allocator_->allocate(DType::F32, {rows, std::max<int64_t>(stride, 1)});
    Tensor row_lengths = allocator_->allocate(DType::I32, {rows});
    p.scores = scores.ptr<float>();
    p.score_stride = checked_int(stride, "indexer score row");
    p.score_rows = checked_int(rows, "indexer score rows");
    p.row_lengths = row_lengths.ptr<int32_t>();
    launch("select_compressed", [&] { kernels::launch_select_compressed(p, stream_); });
    return out;
  }

  Tensor compressed_attention(const Tensor& query, const KvCache& cache, int layer,
                              const CompressedAttentionParams& params, const StepContext& step) override {
    await_kv_layer(layer);
    const auto& ctx = cuda_step(step);
    check_compressed_attention(query, cache, layer, params);
    check_tokens(query, step, "compressed_attention");
    const int64_t num_tokens = query.size(0), num_heads = query.size(1), dim = query.size(2);
    const int64_t top_k = params.selected ? params.selected->size(-1) : 0;
    ctx.check_block_tables(cache.block_size);
    const Tensor q = activation(query, "compressed_attention");
    std::optional<Tensor> sinks;
    if (params.sinks) sinks = constant(*params.sinks, DType::F32, "compressed_attention (sinks)");
    Tensor out = allocator_->allocate(DType::BF16, {num_tokens, num_heads, dim});
    kernels::CompressedAttentionParams p;
    p.query = q.ptr<bf16>();
    if (cache.keys[layer].dtype == DType::F8_E4M3) {
      p.key_codes = static_cast<const __nv_fp8_e4m3*>(cache.keys[layer].data);
      p.key_scale = cache.layers[layer].key_scale;
    } else {
      p.keys = cache.keys[layer].ptr<bf16>();
    }
    if (params.compress_rate > 0) {
      const Tensor& states =
          compressed_layer_states(cache, layer, params.entry_offset + dim, "compressed_attention");
      p.states = states.ptr<float>();
      p.state_dim = checked_int(states.size(1), "state dim");
      p.entry_offset = checked_int(params.entry_offset, "entry offset");
      p.compress_rate = checked_int(params.compress_rate, "compress rate");
    }
    p.sliding_window = checked_int(params.sliding_window, "sliding window");
    p.sinks = sinks ? sinks->ptr<float>() : nullptr;
    p.selected = params.selected ? params.selected->ptr<int32_t>() : nullptr;
    p.top_k = checked_int(top_k, "top_k");
    p.num_heads = checked_int(num_heads, "heads");
    p.head_dim = checked_int(dim, "head dim");
    p.scale = params.scale;
    p.out = out.ptr<bf16>();
    p.tokens = v4_tokens(ctx, cache, layer);
    std::optional<Tensor> partial_out, partial_lse;
    if (const int splits = kernels::compressed_attention_splits(p.tokens.num_tokens); splits > 1) {
      partial_out = allocator_->allocate(DType::F32, {num_tokens, splits, num_heads, dim});
      partial_lse = allocator_->allocate(DType::F32, {num_tokens, splits, num_heads});
      p.partial_out = partial_out->ptr<float>();
      p.partial_lse = partial_lse->ptr<float>();
    }
    launch("compressed_attention", [&] { kernels::launch_compressed_attention(p, stream_); });
    return out;
  }

  Tensor gather_logit_rows(const Tensor& x, const StepContext& step) override {
    const auto& ctx = cuda_step(step);
    const auto& rows = step.batch().logit_rows;
    if (x.shape.empty() || x.size(0) != step.batch().num_tokens()) {
      fail("gather_logit_rows: input has {} rows for a step of {} tokens", x.shape.empty() ? 0 : x.size(0),
           step.batch().num_tokens());
    }
    // Every token's row in order (a decode step's): x itself. Recorded steps are keyed by this
    // (cuda::StepGraphs), so a replay never meets other rows of the same count.
    if (logit_rows_are_tokens(step.batch())) return x;
    const int64_t width = x.row_numel();
    Tensor out = allocator_->allocate(x.dtype, {static_cast<int64_t>(rows.size()), width});
    launch("gather_logit_rows", [&] {
      kernels::launch_gather_rows(x.data, ctx.logit_rows(), out.data, out.size(0), width * dtype_size(x.dtype),
                                  stream_);
    });
    return out;
  }

  bool samples_on_device() const override { return true; }

  bool implements_decode_context_parallel() const override { return true; }

  std::optional<Tensor> sample(const Tensor& logits, std::span<const RowSampling> rows) override {
    static_assert(sizeof(RowSampling) == sizeof(kernels::RowSampling), "RowSampling layouts differ");
    if (logits.shape.empty()) fail("sample: logits have no dimensions");
    const int64_t vocab = logits.size(-1);
    const int64_t num_rows = vocab ? logits.numel() / vocab : 0;
    if (num_rows != static_cast<int64_t>(rows.size())) {
      fail("sample: {} logit rows for {} samplers", num_rows, rows.size());
    }
    for (size_t r = 0; r < rows.size(); ++r) {
      if (!(rows[r].uniform >= 0.0f && rows[r].uniform < 1.0f)) {
        fail("sample: row {} draw {} is outside [0, 1)", r, rows[r].uniform);
      }
      if (rows[r].draft_id >= vocab || rows[r].draft_id < -1 ||
          !(rows[r].draft_uniform >= 0.0f && rows[r].draft_uniform < 1.0f)) {
        fail("sample: row {} draft {} (draw {}) is outside the vocabulary of {} or [0, 1)", r, rows[r].draft_id,
             rows[r].draft_uniform, vocab);
      }
    }
    const Tensor in = activation(logits, "sample");
    Tensor params = allocator_->allocate(DType::I32, {static_cast<int64_t>(rows.size() * sizeof(RowSampling) / 4)});
    staging_->upload(params.data, rows.data(), rows.size_bytes(), stream_);
    Tensor out = allocator_->allocate(DType::I32, {num_rows});
    launch("sample", [&] {
      kernels::launch_sample_bf16(in.ptr<bf16>(), static_cast<const kernels::RowSampling*>(params.data),
                                  out.ptr<int32_t>(), checked_int(num_rows, "rows"), checked_int(vocab, "vocab"),
                                  stream_);
    });
    return out;
  }

  Tensor argmax(const Tensor& logits) override {
    if (logits.shape.empty()) fail("argmax: logits have no dimensions");
    const int64_t vocab = logits.size(-1);
    const int64_t num_rows = vocab ? logits.numel() / vocab : 0;
    Tensor out = allocator_->allocate(DType::I32, {num_rows});
    const int rows = checked_int(num_rows, "rows");
    const int v = checked_int(vocab, "vocab");
    if (logits.dtype == DType::BF16) {
      launch("argmax", [&] {
        kernels::launch_argmax_bf16(logits.ptr<bf16>(), out.ptr<int32_t>(), rows, v, {argmax_workspace_.data}, stream_);
      });
    } else if (logits.dtype == DType::F32) {
      launch("argmax", [&] {
        kernels::launch_argmax_f32(logits.ptr<float>(), out.ptr<int32_t>(), rows, v, {argmax_workspace_.data}, stream_);
      });
    } else {
      fail("argmax: logits are {}", dtype_name(logits.dtype));
    }
    return out;
  }

 private:
  // Attention over a keys-only cache of one KV head whose keys' first values_from_keys dims are the values (MLA's
  // latent): every query head reads the same keys, which the MLA kernel loads once per 64 heads.
  Tensor latent_attention(const Tensor& query, const KvCache& cache, int layer, const AttentionParams& params,
                          const cuda::CudaStepContext& ctx) {
    await_kv_layer(layer);
    check_latent_attention(query, cache.layers[layer], layer, params);
    const int key_dim = checked_int(cache.layers[layer].key_dim, "key_dim");
    const int value_dim = checked_int(params.values_from_keys, "values_from_keys");
    ctx.check_block_tables(cache.block_size);
    const Tensor q = activation(query, "attention");
    const int64_t num_heads = query.size(1);
    Tensor out = allocator_->allocate(DType::BF16, {query.size(0), num_heads, value_dim});
    if (query.size(0) == 0) return out;

    const cuda::AttentionPlan& plan = ctx.attention_plan(true);
    kernels::MlaAttentionParams p;
    p.query = q.ptr<bf16>();
    p.out = out.ptr<bf16>();
    p.kv = paged_kv(cache, layer, ctx);
    p.batch = {ctx.cu_seqlens(), ctx.num_cached(), ctx.token_seq(), ctx.positions()};
    p.num_heads = checked_int(num_heads, "heads");
    p.key_dim = key_dim;
    p.value_dim = value_dim;
    p.scale = params.scale;
    p.tile_seq = plan.tile_seq;
    p.tile_row = plan.tile_row;
    p.num_tiles = plan.num_tiles;
    set_split_plan(p, plan);
    std::optional<Tensor> partial_out, partial_lse;
    if (plan.num_items > 0) {
      partial_out = allocator_->allocate(DType::F32, {plan.num_items, num_heads, value_dim});
      partial_lse = allocator_->allocate(DType::F32, {plan.num_items, num_heads});
      p.partial_out = partial_out->ptr<float>();
      p.partial_lse = partial_lse->ptr<float>();
    }
    launch("attention (MLA)", [&] { kernels::launch_mla_attention(p, stream_); });
    return out;
  }

  static void check_attention_query(const Tensor& query, const KvCache& cache, int layer, const StepContext& step,
                                    const char* op) {
    cached_layer(cache, layer, op);
    if (query.shape.size() != 3) fail("{}: query must be [tokens, heads, dim], got {}", op, shape_string(query.shape));
    check_tokens(query, step, op);
  }

  static void check_dense_attention(const Tensor& query, const KvLayerSpec& spec) {
    if (spec.value_dim != spec.key_dim || query.size(2) != spec.key_dim) {
      fail("attention: the CUDA kernels need query dim = key_dim = value_dim; got {}, {}, {}", query.size(2),
           spec.key_dim, spec.value_dim);
    }
    if (spec.num_kv_heads <= 0 || query.size(1) % spec.num_kv_heads != 0) {
      fail("attention: {} query heads are not a multiple of {} KV heads", query.size(1), spec.num_kv_heads);
    }
  }

  static void check_latent_attention(const Tensor& query, const KvLayerSpec& spec, int layer,
                                     const AttentionParams& params) {
    if (spec.num_kv_heads != 1 || spec.value_dim != 0 || query.size(2) != spec.key_dim) {
      fail("attention: values_from_keys needs one cached KV head of keys only with the query's dim; layer {} caches "
           "{} heads of {}+{} for queries of {}",
           layer, spec.num_kv_heads, spec.key_dim, spec.value_dim, query.size(2));
    }
    if (params.sliding_window > 0 || params.sinks) {
      fail("attention: the CUDA MLA kernel has no sliding window or sinks");
    }
    if (!kernels::mla_attention_supports(static_cast<int>(spec.key_dim), static_cast<int>(params.values_from_keys))) {
      fail("attention: the CUDA MLA kernel needs key and value dims that are multiples of 8 with value_dim <= key_dim "
           "<= {}; got {} and {}",
           kernels::kMlaMaxKeyDim, spec.key_dim, params.values_from_keys);
    }
  }

  // Layer `layer`'s cache as the kernels read it: in its own token order a context shard's cache is an ordinary
  // paged cache under the same tables (kv_context_shard.h).
  kernels::PagedKv paged_kv(const KvCache& cache, int layer, const cuda::CudaStepContext& ctx) {
    kernels::PagedKv kv;
    const KvLayerSpec& spec = cache.layers[layer];
    if (cache.keys[layer].dtype == DType::F8_E4M3) {
      kv.key_codes = static_cast<const __nv_fp8_e4m3*>(cache.keys[layer].data);
      kv.value_codes = static_cast<const __nv_fp8_e4m3*>(cache.values[layer].data);
      kv.key_scale = spec.key_scale;
      kv.value_scale = spec.value_scale;
    } else {
      kv.keys = cache.keys[layer].ptr<bf16>();
      kv.values = spec.value_dim ? cache.values[layer].ptr<bf16>() : nullptr;
    }
    kv.block_size = checked_int(cache.block_size, "block_size");
    kv.num_slots = cache.keys[layer].size(0);
    kv.block_tables = ctx.block_tables();
    kv.block_table_offsets = ctx.block_table_offsets(cache.layer_group.at(layer));
    return kv;
  }

  bool capturing() const {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(stream_, &status), "cudaStreamIsCapturing");
    return status != cudaStreamCaptureStatusNone;
  }

  // gate_up [rows, 2I] -> activated [rows, I] -> down [rows, H] for the grouping's rows, with one kernel each
  // (bf16 and block-FP8 experts over tiles gather their rows first, block FP8 quantizes them: W8A8); with few rows
  // (a warp per output column) the gate_up GEMM writes the activation itself.
  void grouped_gemms(const Tensor& in, const kernels::MoeGrouping& grouping, int64_t max_tiles, int64_t num_pairs,
                     int top_k, const Tensor& gate_up_weight, const Tensor& down_weight, const Tensor* gate_up_bias,
                     const Tensor* down_bias, const GluActivation& activation, bool few_rows, Tensor& activated,
                     Tensor& down) {
    const int64_t intermediate = activated.size(1);
    const int64_t num_experts = gate_up_weight.size(0);
    kernels::MoeGemmParams up;
    up.input = in.ptr<bf16>();
    up.row_pair = grouping.row_pair;
    up.gather_by_pair = true;
    up.top_k = checked_int(top_k, "top_k");
    up.tile_expert = grouping.tile_expert;
    up.max_tiles = max_tiles;
    set_expert_weight(up, gate_up_weight);
    up.bias = gate_up_bias ? gate_up_bias->ptr<bf16>() : nullptr;
    up.n = checked_int(2 * intermediate, "intermediate size");
    up.k = checked_int(in.size(-1), "hidden size");
    up.few_rows = few_rows;
    up.expert_rows = grouping.expert_rows;
    up.num_experts = checked_int(num_experts, "experts");
    up.routed_rows = num_pairs;
    // Over tiles, bf16 and block-FP8 projections take the TMA GEMMs (MXFP4 ones the mma.sync tiles): gate_up's
    // rows gathered first, and the rows quantized for whichever projection is block FP8 (a model may have one of
    // them so: gate and up rows that are not whole 128-row blocks cannot share an expert's grid).
    std::optional<Tensor> gathered, row_codes, row_scales;
    const auto block_fp8 = [](const Tensor& w) { return w.dtype == DType::F8_E4M3 && w.block_scales; };
    if (!few_rows) {
      const int64_t rows = activated.size(0);
      if (gate_up_weight.dtype != DType::F4_E2M1) {
        gathered = allocator_->allocate(DType::BF16, {rows, in.size(-1)});
        up.gathered = gathered->ptr<bf16>();
      }
      if (block_fp8(gate_up_weight) || block_fp8(down_weight)) {
        const int64_t widest = std::max(in.size(-1), intermediate);
        row_codes = allocator_->allocate(DType::F8_E4M3, {rows, widest});
        row_scales = allocator_->allocate(DType::F32, {rows * ((widest + 127) / 128)});
        up.row_codes = static_cast<__nv_fp8_e4m3*>(row_codes->data);
        up.row_scales = row_scales->ptr<float>();
      }
    }
    if (few_rows) {
      up.out = activated.ptr<bf16>();
      up.fuse_gated_activation = true;
      up.activation = gated_spec(activation);
      launch("moe_experts (gate_up, activation)", [&] { kernels::launch_moe_grouped_gemm(up, stream_); });
    } else {
      Tensor gate_up = allocator_->allocate(DType::BF16, {activated.size(0), 2 * intermediate});
      up.out = gate_up.ptr<bf16>();
      launch("moe_experts (gate_up)", [&] { kernels::launch_moe_grouped_gemm(up, stream_); });
      launch("moe_experts (activation)", [&] {
        kernels::launch_moe_gated_activation(gate_up.ptr<bf16>(), activated.ptr<bf16>(), grouping, max_tiles,
                                             checked_int(intermediate, "intermediate size"), gated_spec(activation),
                                             stream_);
      });
    }
    kernels::MoeGemmParams dn = up;
    dn.fuse_gated_activation = false;
    dn.input = activated.ptr<bf16>();
    dn.gather_by_pair = false;
    set_expert_weight(dn, down_weight);
    dn.bias = down_bias ? down_bias->ptr<bf16>() : nullptr;
    dn.out = down.ptr<bf16>();
    dn.n = up.k;
    dn.k = checked_int(intermediate, "intermediate size");
    launch("moe_experts (down)", [&] { kernels::launch_moe_grouped_gemm(dn, stream_); });
  }

  // One token's experts (batch-1 decode) as pair tiles (MoeGemmParams::pair_expert): gate/up with the activation,
  // then down with the weighted sum of the slots, two launches where the grouped path takes four (grouping,
  // gate/up, down, combine); no grouping is needed, since a token's slots name distinct experts.
  Tensor token_experts(const Tensor& in, const ExpertRouting& routing, int64_t first_expert, int64_t intermediate,
                       const Tensor& gate_up_weight, const Tensor& down_weight, const Tensor* gate_up_bias,
                       const Tensor* down_bias, const GluActivation& activation) {
    const int64_t top_k = routing.expert_ids.numel();
    Tensor activated = allocator_->allocate(DType::BF16, {top_k, intermediate});
    Tensor out = allocator_->allocate(DType::BF16, {1, in.size(-1)});
    kernels::MoeGemmParams up;
    up.input = in.ptr<bf16>();
    up.gather_by_pair = true;
    up.top_k = checked_int(top_k, "top_k");
    up.pair_expert = routing.expert_ids.ptr<int32_t>();
    up.first_expert = checked_int(first_expert, "first expert");
    up.num_experts = checked_int(gate_up_weight.size(0), "experts");
    up.max_tiles = top_k;
    up.few_rows = true;
    set_expert_weight(up, gate_up_weight);
    up.bias = gate_up_bias ? gate_up_bias->ptr<bf16>() : nullptr;
    up.out = activated.ptr<bf16>();
    up.n = checked_int(2 * intermediate, "intermediate size");
    up.k = checked_int(in.size(-1), "hidden size");
    up.fuse_gated_activation = true;
    up.activation = gated_spec(activation);
    launch("moe_experts (gate_up, activation)", [&] { kernels::launch_moe_grouped_gemm(up, stream_); });
    kernels::MoeGemmParams dn = up;
    dn.input = activated.ptr<bf16>();
    dn.gather_by_pair = false;
    dn.fuse_gated_activation = false;
    dn.pair_weights = routing.weights.ptr<float>();
    dn.max_tiles = 1;
    set_expert_weight(dn, down_weight);
    dn.bias = down_bias ? down_bias->ptr<bf16>() : nullptr;
    dn.out = out.ptr<bf16>();
    dn.n = up.k;
    dn.k = checked_int(intermediate, "intermediate size");
    launch("moe_experts (down, combine)", [&] { kernels::launch_moe_grouped_gemm(dn, stream_); });
    return out;
  }

  // A block-FP8 weight's codes and scales as the kernels take them.
  static kernels::BlockFp8Codes fp8_codes(const Tensor& weight) {
    return {static_cast<const __nv_fp8_e4m3*>(weight.data), weight.block_scales->ptr<float>(),
            checked_int(weight.block_scales->size(-1), "scale stride")};
  }

  static void set_expert_weight(kernels::MoeGemmParams& p, const Tensor& weight) {
    p.weight = nullptr;
    p.fp8 = {};
    p.mxfp4 = {};
    if (weight.dtype == DType::F4_E2M1) {
      p.mxfp4 = {weight.ptr<uint8_t>(), weight.block_scales->ptr<uint8_t>()};
    } else if (weight.block_scales) {
      p.fp8 = fp8_codes(weight);
    } else {
      p.weight = weight.ptr<bf16>();
    }
  }

  cuda::RankStream rank_stream() { return {*allocator_, *staging_, stream_}; }

  void copy_to_host(const Tensor& t, void* dst) {
    check(cudaMemcpyAsync(dst, t.data, t.bytes(), cudaMemcpyDeviceToHost, stream_), "copy to host");
    check(cudaStreamSynchronize(stream_), "copy to host");
  }

  Tensor zeros(DType dtype, std::vector<int64_t> shape) {
    Tensor t = allocator_->allocate(dtype, std::move(shape));
    check(cudaMemsetAsync(t.data, 0, t.bytes(), stream_), "cudaMemsetAsync");
    return t;
  }

  static kernels::GatedActivationSpec gated_spec(const GluActivation& activation) {
    return {activation.kind == GluActivation::Kind::gpt_oss, activation.limit, activation.alpha};
  }

  static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

  static void require_bf16(const Tensor& t, const char* op) {
    if (t.dtype != DType::BF16) fail("cuda backend: {} works in place on bf16 activations, got {}", op, dtype_name(t.dtype));
  }

  // A bf16 view of a float input: bf16 as it is, float32 converted (e.g. tensors made by from_host_f32).
  Tensor activation(const Tensor& t, const char* op) {
    if (t.dtype == DType::BF16) return t;
    if (t.block_scales) return dequantized(t, op);
    if (t.dtype != DType::F32) fail("cuda backend: {} expects bf16 or float32, got {}", op, dtype_name(t.dtype));
    Tensor out = allocator_->allocate(DType::BF16, t.shape);
    launch(op, [&] { kernels::launch_f32_to_bf16(t.ptr<float>(), out.ptr<bf16>(), t.numel(), stream_); });
    return out;
  }

  // A block-FP8 weight's values rounded to bf16, for the ops that have no FP8 kernel.
  Tensor dequantized(const Tensor& t, const char* op) {
    if (t.dtype == DType::F4_E2M1 || t.experts_own_grids()) {
      fail("cuda backend: {} takes no {} (only the MoE experts do)", op,
           t.dtype == DType::F4_E2M1 ? "MXFP4 weight" : "experts' block-FP8 weight");
    }
    Tensor out = allocator_->allocate(DType::BF16, t.shape);
    launch(op, [&] {
      kernels::launch_dequantize_block_fp8(static_cast<const __nv_fp8_e4m3*>(t.data), t.block_scales->ptr<float>(),
                                           t.numel() / t.size(-1), t.size(-1), t.block_scales->size(1),
                                           out.ptr<bf16>(), stream_);
    });
    return out;
  }

  Tensor f32(const Tensor& t, const char* op) {
    if (t.dtype == DType::F32) return t;
    if (t.dtype != DType::BF16) fail("cuda backend: {} expects bf16 or float32, got {}", op, dtype_name(t.dtype));
    Tensor out = allocator_->allocate(DType::F32, t.shape);
    launch(op, [&] { kernels::launch_bf16_to_f32(t.ptr<bf16>(), out.ptr<float>(), t.numel(), stream_); });
    return out;
  }

  // hyper_mix's operands in float32 as its kernels read them, kept alive with the kernels' view of them (out [T,
  // width] float32).
  struct MixOperands {
    Tensor mixes, base, scale;
    kernels::HyperMixParams params;
  };
  MixOperands mix_operands(const Tensor& mixes, const Tensor& base, const Tensor& scale, const HyperMixParams& params,
                           Tensor& out, const char* op) {
    MixOperands operands{f32(mixes, op), constant(base, DType::F32, op), constant(scale, DType::F32, op), {}};
    kernels::HyperMixParams& p = operands.params;
    p.mixes = operands.mixes.ptr<float>();
    p.base = operands.base.ptr<float>();
    p.scale = operands.scale.ptr<float>();
    p.out = out.ptr<float>();
    p.num_tokens = checked_int(out.size(0), "tokens");
    p.num_streams = checked_int(params.num_streams, "streams");
    p.width = checked_int(out.size(1), "mixes");
    p.sinkhorn_iters = checked_int(params.sinkhorn_iters, "Sinkhorn iterations");
    p.eps = params.eps;
    return operands;
  }

  // Head norm weights as the rope kernels read them (bf16, heads of up to kernels::kMaxNormedHeadDim dims), kept
  // alive with the pointers to them.
  struct HeadNorms {
    Tensor query, key;
    kernels::HeadNorms params;
  };
  HeadNorms head_norms(const HeadNormWeights& norms, int64_t head_dim, const char* op) {
    HeadNorms out;
    if (!norms.query) return out;
    if (!norms.key || norms.query->numel() != head_dim || norms.key->numel() != head_dim) {
      fail("{}: head norms need query and key weights of head_dim {} values", op, head_dim);
    }
    out.query = constant(*norms.query, DType::BF16, op);
    out.key = constant(*norms.key, DType::BF16, op);
    out.params = {out.query.ptr<bf16>(), out.key.ptr<bf16>(), norms.eps};
    return out;
  }

  // A weight or other constant in `dtype` (bf16 or float32), converted once and kept while the weight lives: the
  // float32 vectors that model code makes with from_host_f32 (norm weights of ones) and the bf16 parameters that
  // kernels read as float32 (sinks, mHC's base and scale, routers' bias) cost a conversion kernel per use otherwise,
  // tens of launches in each DeepSeek-V4 decode step.
  Tensor constant(const Tensor& t, DType dtype, const char* op) {
    if (t.dtype == dtype) return t;
    if (converted_constants_.size() >= 2 * live_constants_ + 64) {  // drop conversions of weights that are gone
      std::erase_if(converted_constants_, [](const auto& item) { return item.second.source.expired(); });
      live_constants_ = converted_constants_.size();
    }
    ConvertedConstant& entry = converted_constants_[{t.data, dtype, t.shape}];
    const bool same_weight = !entry.source.owner_before(t.storage) && !t.storage.owner_before(entry.source);
    if (entry.source.expired() || !same_weight) {
      entry.source = t.storage;
      entry.converted = dtype == DType::F32 ? f32(t, op) : activation(t, op);
    }
    return entry.converted;
  }

  void norm(const Tensor& in, Tensor* residual, const Tensor& weight, float eps, Tensor& out, const char* op) {
    const int64_t width = weight.numel();
    if (width == 0 || in.numel() % width != 0 || in.size(-1) % width != 0) {
      fail("{}: input of shape {} does not split into rows of the weight's {} values", op, shape_string(in.shape),
           width);
    }
    const Tensor w = constant(weight, DType::BF16, op);
    kernels::RmsNormParams p;
    p.x = in.ptr<bf16>();
    p.residual = residual ? residual->ptr<bf16>() : nullptr;
    p.weight = w.ptr<bf16>();
    p.out = out.ptr<bf16>();
    p.num_rows = checked_int(in.numel() / width, "rows");
    p.width = checked_int(width, "width");
    p.eps = eps;
    launch(op, [&] { kernels::launch_rms_norm(p, stream_); });
  }

  static void check_tokens(const Tensor& x, const StepContext& step, const char* op) {
    if (x.shape.empty() || x.size(0) != step.batch().num_tokens()) {
      fail("{}: input has {} rows for a step of {} tokens", op, x.shape.empty() ? 0 : x.size(0),
           step.batch().num_tokens());
    }
  }

  static kernels::RopeSpec rope_spec(const RopeTable& table, int64_t head_dim, bool inverse) {
    if (table.inv_freq.dtype != DType::F32 || table.inv_freq.numel() * 2 != table.rotary_dim) {
      fail("rope: the table needs rotary_dim / 2 = {} float32 frequencies, has {} {}", table.rotary_dim / 2,
           table.inv_freq.numel(), dtype_name(table.inv_freq.dtype));
    }
    if (table.rotary_dim > head_dim) fail("rope: rotary dim {} exceeds head dim {}", table.rotary_dim, head_dim);
    kernels::RopeSpec spec{table.inv_freq.ptr<float>(), checked_int(table.rotary_dim, "rotary_dim"),
                           table.attention_scaling, table.interleaved};
    spec.first_dim = table.rotate_last_dims ? checked_int(head_dim - table.rotary_dim, "first rotated dim") : 0;
    spec.inverse = inverse;
    return spec;
  }

  // A rope table as the V4 kernels rotate a float32 vector of `dim` with it.
  static kernels::v4::RotarySpec rotary_spec(const RopeTable& table, int64_t dim) {
    const kernels::RopeSpec spec = rope_spec(table, dim, false);
    return {spec.inv_freq, spec.rotary_dim, spec.attention_scaling, spec.interleaved, spec.first_dim};
  }

  static kernels::V4Tokens v4_tokens(const cuda::CudaStepContext& ctx, const KvCache& cache, int layer) {
    return {ctx.positions(), ctx.token_seq(), ctx.block_tables(), ctx.block_table_offsets(cache.layer_group.at(layer)),
            checked_int(cache.block_size, "block_size"), checked_int(ctx.batch().num_tokens(), "tokens")};
  }

  // x [tokens, heads, head_dim] rotated in place at device positions [tokens].
  void rotate(Tensor& x, const kernels::RopeSpec& spec, const int32_t* positions) {
    launch("rope", [&] {
      kernels::launch_rope(x.ptr<bf16>(), checked_int(x.size(0), "tokens"), checked_int(x.size(1), "heads"),
                           checked_int(x.size(2), "head_dim"), spec, positions, stream_);
    });
  }

  // A pre-norm projection's batch-1 GEMV (its params but the output), with the bf16 inputs they point to, which must
  // stay allocated until the launch is queued.
  struct PreNormGemv {
    kernels::GemvParams params;
    std::vector<Tensor> inputs;
    Tensor next_residual;
  };

  // The GEMV when the shapes fit it: one token, K and N within the kernel's shapes, 16-byte aligned.
  std::optional<PreNormGemv> pre_norm_gemv(const PreNorm& input, const Tensor& weight, const Tensor* bias) {
    const Tensor& residual = input.residual;
    const int64_t k = residual.shape.empty() ? 0 : residual.size(-1);
    const int64_t n = weight.shape.size() == 2 ? weight.size(0) : 0;
    const bool fp8 = weight.dtype == DType::F8_E4M3 && weight.block_scales;
    const bool fits = residual.dtype == DType::BF16 && (weight.dtype == DType::BF16 || fp8) &&
                      residual.numel() == k && weight.size(1) == k && input.norm_weight.numel() == k &&
                      (!input.addend || input.addend->numel() == k) &&
                      (fp8 ? kernels::gemv_supports_fp8(1, n, k) : kernels::gemv_supports(1, n, k)) &&
                      (!bias || bias->numel() == n) && aligned16(residual.data) && aligned16(weight.data) &&
                      (!input.addend || aligned16(input.addend->data));
    if (!fits) return std::nullopt;
    PreNormGemv gemv;
    kernels::GemvParams& p = gemv.params;
    p.x = residual.ptr<bf16>();
    set_gemv_weight(p, weight);
    p.n = static_cast<int>(n);
    p.k = static_cast<int>(k);
    p.norm_weight = gemv.inputs.emplace_back(activation(input.norm_weight, "pre-norm GEMV (norm weight)")).ptr<bf16>();
    p.eps = input.eps;
    if (bias) p.bias = gemv.inputs.emplace_back(constant(*bias, DType::BF16, "pre-norm GEMV (bias)")).ptr<bf16>();
    gemv.next_residual = residual;
    if (input.addend) {
      p.addend = gemv.inputs.emplace_back(activation(*input.addend, "pre-norm GEMV (addend)")).ptr<bf16>();
      gemv.next_residual = allocator_->allocate(DType::BF16, residual.shape);
      p.residual_out = gemv.next_residual.ptr<bf16>();
    }
    return gemv;
  }

  static void set_gemv_weight(kernels::GemvParams& p, const Tensor& weight) {
    p.weight = weight.block_scales ? nullptr : weight.ptr<bf16>();
    p.fp8 = weight.block_scales ? fp8_codes(weight) : kernels::BlockFp8Codes{};
  }

  void run(const PreNormGemv& gemv, PreNorm& input, const char* what) {
    launch(what, [&] { kernels::launch_gemv(gemv.params, stream_); });
    input.residual = gemv.next_residual;
  }

  // The launch parameters and the bf16 inputs they point to, which must stay allocated until the launch is queued.
  struct KvWrite {
    kernels::KvWriteParams params;
    Tensor key, value;
  };

  static const KvLayerSpec& cached_layer(const KvCache& cache, int layer, const char* op) {
    if (layer < 0 || layer >= static_cast<int>(cache.layers.size())) fail("{}: layer {} not in the cache", op, layer);
    return cache.layers[layer];
  }

  cuda::KvTierCopier& tier_copier() {
    if (!tier_copier_) tier_copier_ = std::make_unique<cuda::KvTierCopier>(stream_);
    return *tier_copier_;
  }

  // Before an op's first use of a layer's KV blocks in a step: the tier copies into or out of them are done.
  void await_kv_layer(int layer) {
    if (tier_copier_) tier_copier_->await_layer(layer);
  }

  // Where a step's keys and values go in layer `layer` of the cache; the caller sets where they come from.
  kernels::KvWriteParams kv_destination(KvCache& cache, int layer, int64_t num_tokens, const StepContext& step) {
    const auto& ctx = cuda_step(step);
    const KvLayerSpec& spec = cached_layer(cache, layer, "store_kv");
    ctx.check_block_tables(cache.context_shard.tokens_per_block(cache.block_size));
    kernels::KvWriteParams p;
    if (cache.keys[layer].dtype == DType::F8_E4M3) {
      p.key_codes = static_cast<__nv_fp8_e4m3*>(cache.keys[layer].data);
      p.value_codes = static_cast<__nv_fp8_e4m3*>(cache.values[layer].data);
      p.key_scale = spec.key_scale;
      p.value_scale = spec.value_scale;
    } else {
      p.key_cache = cache.keys[layer].ptr<bf16>();
      p.value_cache = spec.value_dim ? cache.values[layer].ptr<bf16>() : nullptr;
    }
    p.num_tokens = checked_int(num_tokens, "tokens");
    p.num_kv_heads = checked_int(spec.num_kv_heads, "kv heads");
    p.key_dim = checked_int(spec.key_dim, "key_dim");
    p.value_dim = checked_int(spec.value_dim, "value_dim");
    p.slots = {ctx.positions(), ctx.token_seq(), ctx.block_tables(),
               ctx.block_table_offsets(cache.layer_group.at(layer)), checked_int(cache.block_size, "block_size"),
               cache.context_shard.rank, cache.context_shard.size};
    return p;
  }

  KvWrite kv_write(KvCache& cache, int layer, const Tensor& key, const Tensor& value, const StepContext& step) {
    const KvLayerSpec& spec = cached_layer(cache, layer, "store_kv");
    const int64_t key_row = spec.num_kv_heads * spec.key_dim;
    const int64_t value_row = spec.num_kv_heads * spec.value_dim;
    if (key.row_numel() != key_row || (value_row && value.row_numel() != value_row)) {
      fail("store_kv: layer {} caches {}+{} values per token, got {}+{}", layer, key_row, value_row, key.row_numel(),
           value_row ? value.row_numel() : 0);
    }
    check_tokens(key, step, "store_kv");
    KvWrite write;
    write.params = kv_destination(cache, layer, key.size(0), step);
    write.key = activation(key, "store_kv (key)");
    if (value_row) write.value = activation(value, "store_kv (value)");
    kernels::KvWriteParams& p = write.params;
    p.key = write.key.ptr<bf16>();
    p.value = value_row ? write.value.ptr<bf16>() : nullptr;
    p.key_stride = key_row;
    p.value_stride = value_row;
    return write;
  }

  Tensor linear_to(const Tensor& x, const Tensor& weight, const Tensor* bias, DType out_dtype) {
    if (weight.shape.size() != 2) fail("linear: weight must be [N, K], got {}", shape_string(weight.shape));
    const int64_t n = weight.size(0);
    const int64_t k = weight.size(1);
    if (x.shape.empty() || x.size(-1) != k) fail("linear: input has {} features, weight expects {}", x.shape.empty() ? 0 : x.size(-1), k);
    const Tensor in = activation(x, "linear");
    std::optional<Tensor> b;
    if (bias) {
      if (bias->numel() != n) fail("linear: bias has {} values for {} outputs", bias->numel(), n);
      b = constant(*bias, out_dtype == DType::F32 ? DType::F32 : DType::BF16, "linear (bias)");
    }
    const int64_t m = x.numel() / k;
    if (weight.dtype == DType::F8_E4M3 && weight.block_scales) return block_fp8_linear(in, weight, b, out_dtype, m);
    const Tensor w = constant(weight, DType::BF16, "linear (weight)");
    Tensor out = allocator_->allocate(out_dtype, {m, n});
    if (out_dtype == DType::BF16 && kernels::gemv_supports(m, n, k) && aligned16(in.data) && aligned16(w.data)) {
      gemv(in, w, b, out, "linear (gemv)");
      return out;
    }
    if (out_dtype == DType::F32 && !b && kernels::skinny_gemv_f32_supports(m, n, k) && aligned16(in.data) &&
        aligned16(w.data)) {
      launch("linear (skinny gemv)", [&] {
        kernels::launch_skinny_gemv_f32(in.ptr<bf16>(), w.ptr<bf16>(), out.ptr<float>(), static_cast<int>(n),
                                        static_cast<int>(k), stream_);
      });
      return out;
    }
    gemm_->run(in.data, w.data, b ? b->data : nullptr, out.data, m, n, k, out_dtype == DType::F32);
    return out;
  }

  // out [1, N] (bf16) = in [1, K] times weight (bf16 or block FP8) transposed (+ bias).
  void gemv(const Tensor& in, const Tensor& weight, const std::optional<Tensor>& bias, Tensor& out, const char* what) {
    kernels::GemvParams p;
    p.x = in.ptr<bf16>();
    set_gemv_weight(p, weight);
    p.bias = bias ? bias->ptr<bf16>() : nullptr;
    p.out = out.ptr<bf16>();
    p.n = checked_int(weight.size(0), "gemv rows");
    p.k = checked_int(weight.size(1), "gemv columns");
    launch(what, [&] { kernels::launch_gemv(p, stream_); });
  }

  // x [m, K] times a block-FP8 weight: the GEMV on its codes for one row, the few-rows GEMM on them up to 16 rows
  // (both W8A16); for more, x quantized per row and 128 columns (W8A8, DeepSeek's dynamic activation scheme) and the
  // FP8 tensor-core GEMM (kernels/linear/fp8_gemm).
  Tensor block_fp8_linear(const Tensor& in, const Tensor& weight, const std::optional<Tensor>& bias, DType out_dtype,
                          int64_t m) {
    const int64_t n = weight.size(0), k = weight.size(1);
    Tensor out = allocator_->allocate(out_dtype, {m, n});
    if (m == 1 && out_dtype == DType::BF16 && kernels::gemv_supports_fp8(m, n, k) && aligned16(in.data)) {
      gemv(in, weight, bias, out, "linear (block-FP8 gemv)");
      return out;
    }
    if (kernels::few_rows_gemm_supports(m, n, k) && aligned16(in.data)) {
      kernels::FewRowsGemmParams p;
      p.x = in.ptr<bf16>();
      p.fp8 = fp8_codes(weight);
      p.bias = bias ? bias->data : nullptr;
      p.out = out.data;
      p.f32_out = out_dtype == DType::F32;
      p.m = static_cast<int>(m);
      p.n = checked_int(n, "output features");
      p.k = checked_int(k, "input features");
      launch("linear (block-FP8 few rows)", [&] { kernels::launch_few_rows_gemm(p, stream_); });
      return out;
    }
    Tensor codes = allocator_->allocate(DType::F8_E4M3, {m, k});
    Tensor x_scales = allocator_->allocate(DType::F32, {(k + 127) / 128, m});
    launch("linear (block-FP8 activations)", [&] {
      kernels::launch_quantize_rows_fp8(in.ptr<bf16>(), m, k, static_cast<__nv_fp8_e4m3*>(codes.data),
                                        x_scales.ptr<float>(), stream_);
    });
    kernels::Fp8GemmParams p;
    p.x = static_cast<const __nv_fp8_e4m3*>(codes.data);
    p.x_scales = x_scales.ptr<float>();
    p.x_scale_stride = m;
    p.weight = fp8_codes(weight);
    p.bias = bias ? bias->data : nullptr;
    p.out = out.data;
    p.f32_out = out_dtype == DType::F32;
    p.m = checked_int(m, "rows");
    p.n = checked_int(n, "output features");
    p.k = checked_int(k, "input features");
    std::optional<Tensor> split_workspace;
    if (const int64_t floats = kernels::fp8_gemm_workspace_floats(p.m, p.n, p.k); floats > 0) {
      split_workspace = allocator_->allocate(DType::F32, {floats});
      p.split_workspace = split_workspace->ptr<float>();
    }
    launch("linear (block-FP8 gemm)", [&] { kernels::launch_fp8_gemm(p, stream_); });
    return out;
  }

  static ncclDataType_t nccl_type(const Tensor& x, const char* op) {
    if (x.dtype == DType::BF16) return ncclBfloat16;
    if (x.dtype == DType::F32) return ncclFloat32;
    fail("{}: {} tensors are not supported", op, dtype_name(x.dtype));
  }

  std::shared_ptr<cuda::DeviceAllocator> allocator_;
  struct ConvertedConstant {
    std::weak_ptr<void> source;  // the weight's storage: a later tensor at the same address is another weight
    Tensor converted;
  };
  // By address, type and shape: a view of a weight's first rows starts where the weight does.
  std::map<std::tuple<const void*, DType, std::vector<int64_t>>, ConvertedConstant> converted_constants_;
  size_t live_constants_ = 0;  // entries after the last sweep of expired ones
  std::shared_ptr<cuda::NcclGroup> group_;
  int rank_ = 0;
  std::string device_name_;
  int compute_capability_ = 0;  // major * 10 + minor
  int num_sms_ = 1;
  // What the split-KV plan needs of the allocated caches' layers (a plan is made once per step, before the layers
  // run): their most KV heads, and whether all of them can take the whole-context kernel (until a layer that
  // cannot is allocated).
  kernels::DecodeLayers decode_layers_{.num_kv_heads = 1, .whole_context = true};
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<cuda::PinnedStaging> staging_;
  std::shared_ptr<cuda::PinnedIdsPool> pinned_ids_ = std::make_shared<cuda::PinnedIdsPool>();
  Tensor gemm_workspace_;
  Tensor argmax_workspace_;  // kernels::ArgmaxWorkspace, its tickets at zero between launches
  std::unique_ptr<cuda::Gemm> gemm_;
  std::unique_ptr<cuda::StepGraphs> graphs_;
  std::unique_ptr<cuda::KvTierCopier> tier_copier_;  // made with the first copy to or from the host tier
};

}  // namespace

namespace {

class CudaBackendGroup final : public BackendGroup {
 public:
  explicit CudaBackendGroup(int size) : size_(size) {
    if (size > 1) nccl_ = std::make_shared<cuda::NcclGroup>(size);
  }
  int size() const override { return size_; }
  std::unique_ptr<Backend> make(int rank) override {
    if (rank < 0 || rank >= size_) fail("cuda backend group: rank {} outside a group of {}", rank, size_);
    return std::make_unique<CudaBackend>(rank, nccl_);
  }

 private:
  int size_;
  std::shared_ptr<cuda::NcclGroup> nccl_;
};

}  // namespace

int cuda_device_count() {
  int count = 0;
  // No driver or no device is no error here: the caller then picks the CPU.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<Backend> make_cuda_backend(int device) { return std::make_unique<CudaBackend>(device); }

std::unique_ptr<BackendGroup> make_cuda_backend_group(int size) { return std::make_unique<CudaBackendGroup>(size); }

}  // namespace tern
