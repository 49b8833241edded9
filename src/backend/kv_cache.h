#pragma once
// The paged KV cache's storage: per layer, one key and one value tensor of num_blocks * block_size token slots.
// Which blocks belong to which sequence is the engine's business (block tables in ForwardBatch, one per KV cache
// group); layers only declare what one token costs them and which tokens they read again (KvLayerSpec).
#include <cstdint>
#include <string>
#include <vector>

#include "backend/kv_context_shard.h"
#include "backend/tensor.h"

namespace tern {

// How a layer uses its cached tokens, so the engine knows which blocks it may free: all of them stay readable
// (full, MLA latent), or only the last `sliding_window_tokens` (sliding window), or the last
// `sliding_window_tokens` plus compressed entries written every `compress_rate` tokens (DeepSeek-V4's CSA/HCA).
// A compressed layer keeps each compressed entry in the state row of the token that closes its window, so all of
// its blocks stay readable, as for full attention.
enum class KvLayerKind { full, sliding_window, mla_latent, compressed };

// What the cache's keys and values are stored as (vLLM's --kv-cache-dtype). `automatic`: the backend's activation
// type (float32 on the CPU, bf16 on CUDA). fp8_e4m3: the e4m3 code of each value divided by its layer's per-tensor
// scale (KvLayerSpec::key_scale, value_scale), read back as code times scale; a quarter of the CPU's bytes, half of
// bf16's. Layer state (DeepSeek-V4's compressor accumulators and compressed entries) stays float32.
enum class KvCacheDtype { automatic, fp8_e4m3 };
// "auto", "fp8" or "fp8_e4m3" (vLLM's names; its fp8 is e4m3 on CUDA); throws tern::Error naming the choices.
KvCacheDtype parse_kv_cache_dtype(const std::string& name);
const char* kv_cache_dtype_name(KvCacheDtype dtype);

struct KvLayerSpec {
  int64_t num_kv_heads = 0;
  int64_t key_dim = 0;    // per head
  int64_t value_dim = 0;  // per head; 0 when the layer caches keys only (e.g. MLA's shared latent)
  KvLayerKind kind = KvLayerKind::full;
  int64_t sliding_window_tokens = 0;  // sliding_window, compressed: how many recent tokens a query reads
  int64_t compress_rate = 0;          // compressed: source tokens folded into one compressed entry
  // Floats per token of layer state besides keys and values, laid out by the model (DeepSeek-V4: each
  // compressor's projected kv and gate per token, and the compressed entry of the window the token closes).
  int64_t state_dim = 0;
  // > 0: only a sequence's first `shareable_prefix_tokens` tokens have cache contents that are a function of those
  // tokens alone, so only they may be shared with another sequence through the prefix cache. DeepSeek-V4's CSA:
  // once a token sees more than index_topk compressed entries, its indexer breaks score ties by the prompt length
  // (see select_compressed), so what it caches also depends on the prompt, and two prompts sharing a prefix do not
  // give that prefix equal caches. 0: every token may be shared.
  int64_t shareable_prefix_tokens = 0;
  // The per-tensor scales of an FP8 KV cache (KvCacheDtype::fp8_e4m3): a cached key is e4m3(key / key_scale). 1
  // unless the checkpoint calibrated them (vLLM's default too).
  float key_scale = 1.0f;
  float value_scale = 1.0f;
};

// Layers whose blocks are allocated, freed and cached together, with one block table per sequence (vLLM's KV cache
// groups). Layers that read every token (full, MLA latent, compressed) share a group whose blocks live as long as
// the sequence; sliding-window layers of one window form a group that drops the blocks no later query reads.
struct KvCacheGroup {
  int64_t sliding_window_tokens = 0;  // 0: the layers read every token; else each query reads the last this many
  std::vector<int> layers;            // ascending
};

// The groups of a model's layers:
// - no sliding layers, or sliding layers of several windows: one group that keeps every block (as a single table);
// - only sliding layers of one window (Mistral-style): one sliding group;
// - as many sliding layers of one window as other layers, the j-th of each caching the same bytes per token
//   (gpt-oss): two groups, the keep-all one first. The j-th layer of the sliding group stores its blocks in the
//   j-th layer of the first group's tensors, so a block id costs the bytes of one group's layers whichever group
//   holds it (vLLM's equal page sizes); the groups never hold the same block at once.
// Any other mix stays one keep-all group: freeing would need storage of its own per group.
std::vector<KvCacheGroup> kv_cache_groups(const std::vector<KvLayerSpec>& layers);

// Each group's sliding window in tokens (0: the group keeps every block), as the KV cache manager takes them.
std::vector<int64_t> group_sliding_windows(const std::vector<KvCacheGroup>& groups);

struct KvCache {
  KvCacheDtype dtype = KvCacheDtype::automatic;  // what keys and values hold
  int64_t num_blocks = 0;
  int64_t block_size = 0;  // token slots per block in this cache; the scheduler's blocks hold context_shard's share
  // Decode context parallelism: the tokens of each sequence this cache holds (all of them when size is 1).
  KvContextShard context_shard;
  std::vector<KvLayerSpec> layers;
  std::vector<KvCacheGroup> groups;
  std::vector<int> layer_group;  // per layer: its group, the index of its table in SequenceChunk::block_tables
  // Per layer: the tensors below of layers of a later group alias those of the first group's layer they pair with.
  std::vector<Tensor> keys;    // per layer: [num_blocks * block_size, num_kv_heads, key_dim]
  std::vector<Tensor> values;  // per layer: [num_blocks * block_size, num_kv_heads, value_dim]
  std::vector<Tensor> states;  // per layer: [num_blocks * block_size, state_dim]
};

// A cache of `num_blocks` blocks for `layers` without its tensors: the groups and each layer's group set. The
// backend allocates tensors for the layers that `storage_layer` maps to themselves and shares them with the others.
struct KvCacheShape {
  KvCache cache;
  std::vector<int> storage_layer;  // per layer: the layer whose tensors it uses
};
KvCacheShape kv_cache_shape(const std::vector<KvLayerSpec>& layers, int64_t num_blocks, int64_t block_size);

// Bytes of storage behind one token slot of a block (keys, values and layer state), for an element size of
// `element_bytes`: all layers' bytes for a model of one group; for a model of two groups, those of the first
// group's layers, whose tensors the second group's share.
int64_t kv_bytes_per_token(const std::vector<KvLayerSpec>& layers, int64_t element_bytes);

// The layers' cache kinds, counted: "2 full, 2 sliding window" (for the engine's start-up log).
std::string kv_layers_summary(const std::vector<KvLayerSpec>& layers);

// How many leading tokens of a sequence the prefix cache may share: the least shareable_prefix_tokens of the
// layers that set one, 0 when none does (no limit).
int64_t shareable_prefix_tokens(const std::vector<KvLayerSpec>& layers);

}  // namespace tern
