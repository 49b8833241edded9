#pragma once
// A fixture's golden_logits.safetensors as the tests compare against it.
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/safetensors.h"

namespace tern::testing {

// logits_<prompt> of `golden` ([T, vocab], golden.json's prompt `prompt`) as float32; throws tern::Error naming the
// file where it has none.
inline std::vector<float> golden_logits(const SafetensorsFile& golden, size_t prompt) {
  const TensorInfo* logits = golden.find("logits_" + std::to_string(prompt));
  if (!logits) fail("{}: no logits_{}", golden.path().string(), prompt);
  std::vector<float> values(logits->numel());
  convert_to_f32(logits->dtype, logits->data, values.data(), values.size());
  return values;
}

}  // namespace tern::testing
