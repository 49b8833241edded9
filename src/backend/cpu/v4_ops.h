#pragma once
// The CPU reference of DeepSeek-V4's ops: mHC stream mixing and the compressed (CSA / HCA) attention path.
#include "backend/backend.h"

namespace tern::cpu {

Tensor hyper_mix(const Tensor& mixes, const Tensor& base, const Tensor& scale, const HyperMixParams& params);
Tensor hyper_collapse(const Tensor& streams, const Tensor& mix);
Tensor hyper_expand(const Tensor& streams, const Tensor& block_out, const Tensor& mix);

void compress_kv(KvCache& cache, int layer, const Tensor& kv, const Tensor& gate, const CompressorParams& params,
                 const ForwardBatch& batch);
Tensor select_compressed(const Tensor& query, const Tensor& head_weights, const KvCache& cache, int layer,
                         const IndexerParams& params, const ForwardBatch& batch);
Tensor compressed_attention(const Tensor& query, const KvCache& cache, int layer,
                            const CompressedAttentionParams& params, const ForwardBatch& batch);

}  // namespace tern::cpu
