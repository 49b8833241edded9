#pragma once
// Helpers of the quantized-checkpoint tests (fp8_checkpoint_test, mxfp4_checkpoint_test): writing a quantized twin
// of a fixture model, its CPU logits, the check of a transformers-made checkpoint against its goldens, and the error
// a malformed one fails to load with.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "golden_logits.h"
#include "model/model.h"
#include "model/safetensors.h"
#include "model/sequence_runner.h"

namespace tern::testing {

// Writes a checkpoint of `tensors` into `dir`, with `config` and the fixture's other files linked.
inline void write_model(const std::filesystem::path& dir, const std::filesystem::path& fixture,
                        const std::vector<TensorInfo>& tensors, const nlohmann::json& config) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  write_safetensors(dir / "model.safetensors", tensors);
  std::ofstream(dir / "config.json") << config.dump(2);
  for (const auto& entry : std::filesystem::directory_iterator(fixture)) {
    const auto name = entry.path().filename();
    if (name != "config.json" && name != "model.safetensors") std::filesystem::create_symlink(entry.path(), dir / name);
  }
}

// The CPU backend's logits of the model in `dir` for every position of `ids`.
inline std::vector<float> cpu_logits(const std::filesystem::path& dir, const std::vector<int32_t>& ids) {
  auto backend = make_cpu_backend(2);
  auto model = load_model(dir, *backend);
  SequenceRunner runner(*model, *backend, static_cast<int64_t>(ids.size()));
  return backend->to_host_f32(runner.append(ids, true));
}

// A quantized checkpoint of tests/data, made by transformers (tests/data/README.md): on the CPU backend its logits
// meet transformers' float64 forward over the dequantized weights within 1e-5, and its greedy tokens are equal.
inline void expect_cpu_meets_float64_goldens(const std::filesystem::path& dir) {
  const auto golden = read_json(dir / "golden.json");
  auto backend = make_cpu_backend(2);
  auto model = load_model(dir, *backend);
  const std::vector<double> errors = prompt_logit_errors(*model, *backend, dir);
  for (size_t p = 0; p < golden["prompts"].size(); ++p) {
    EXPECT_LE(errors[p], 1e-5) << "prompt " << p;
    const auto prompt = golden["prompts"][p].get<std::vector<int32_t>>();
    EXPECT_EQ(nlohmann::json(greedy_generate(*model, *backend, prompt, 24)), golden["greedy_24"][p]) << "prompt " << p;
  }
}

// The largest absolute difference over the largest absolute reference value.
inline float relative_error(const std::vector<float>& ours, const std::vector<float>& reference) {
  EXPECT_EQ(ours.size(), reference.size());
  float max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < reference.size() && i < ours.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(ours[i] - reference[i]));
    max_ref = std::max(max_ref, std::abs(reference[i]));
  }
  return max_diff / max_ref;
}

// The message loading the model in `dir` fails with; empty when it loads.
inline std::string load_error(const std::filesystem::path& dir) {
  try {
    auto backend = make_cpu_backend(1);
    load_model(dir, *backend);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace tern::testing
