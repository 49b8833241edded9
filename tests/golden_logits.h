#pragma once
// A fixture's golden_logits.safetensors as the tests compare against it.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/error.h"
#include "fixtures.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/sequence_runner.h"

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

// Per prompt of the fixture in `dir` (golden.json's), the relative error (max |diff| / max |golden|) of `model`'s
// logits at every position of the prompt against its golden_logits.
inline std::vector<double> prompt_logit_errors(Model& model, Backend& backend, const std::filesystem::path& dir) {
  const auto golden = read_json(dir / "golden.json");
  const auto reference = SafetensorsFile::open(dir / "golden_logits.safetensors");
  std::vector<double> errors;
  for (size_t p = 0; p < golden["prompts"].size(); ++p) {
    const auto prompt = golden["prompts"][p].get<std::vector<int32_t>>();
    SequenceRunner runner(model, backend, static_cast<int64_t>(prompt.size()));
    const std::vector<float> ours = backend.to_host_f32(runner.append(prompt, true));
    const std::vector<float> expected = golden_logits(*reference, p);
    if (ours.size() != expected.size()) fail("prompt {}: {} logits, golden {}", p, ours.size(), expected.size());
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      if (std::isnan(ours[i])) max_diff = INFINITY;
      max_diff = std::max(max_diff, std::abs(static_cast<double>(ours[i]) - expected[i]));
      max_ref = std::max(max_ref, std::abs(static_cast<double>(expected[i])));
    }
    errors.push_back(max_ref > 0 ? max_diff / max_ref : max_diff);
  }
  return errors;
}

}  // namespace tern::testing
