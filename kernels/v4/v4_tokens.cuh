#pragma once
// What the V4 kernels share about a step's tokens (V4Tokens): a token's cache slot on the device, and the check
// their launchers make on the host.
#include <stdexcept>
#include <string>

#include "v4/compressed_kv.h"
#include "v4/v4_math.h"

namespace tern::kernels::v4 {

__device__ __forceinline__ int64_t token_slot(const V4Tokens& tokens, int token, int position) {
  return paged_slot(tokens.block_tables, tokens.block_table_offsets[tokens.token_seq[token]], position,
                    tokens.block_size);
}

inline void check_tokens(const V4Tokens& tokens, const char* what) {
  if (tokens.num_tokens < 0 || tokens.block_size <= 0) {
    throw std::invalid_argument(std::string(what) + ": needs a positive block size");
  }
}

}  // namespace tern::kernels::v4
