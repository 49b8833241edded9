#pragma once
#include "backend/backend.h"
#include "model/rope.h"

namespace tern {

// The rotary table of a model on `backend`: frequencies for the leading head_dim * partial_rotary_factor dims.
RopeTable make_rope_table(Backend& backend, const RopeConfig& rope, int64_t head_dim, int64_t max_position_embeddings);

}  // namespace tern
