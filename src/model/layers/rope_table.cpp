#include "model/layers/rope_table.h"

namespace tern {

RopeTable make_rope_table(Backend& backend, const RopeConfig& rope, int64_t head_dim, int64_t max_position_embeddings) {
  RopeTable table;
  table.rotary_dim = static_cast<int64_t>(head_dim * rope.partial_rotary_factor);
  const RopeFrequencies frequencies =
      rope_frequencies(rope, static_cast<int>(table.rotary_dim), max_position_embeddings);
  table.inv_freq = backend.from_host_f32(frequencies.inv_freq, {static_cast<int64_t>(frequencies.inv_freq.size())});
  table.attention_scaling = frequencies.attention_scaling;
  return table;
}

}  // namespace tern
