#pragma once
// Speculative decoding settings, read from vLLM's --speculative-config JSON object: which proposer drafts tokens
// and how many a decoding sequence verifies per step.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "model/quantization_config.h"

namespace tern {

enum class SpeculativeMethod { kNgram, kDraftModel, kDeepseekMtp, kEagle3 };

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kNgram;
  int32_t num_speculative_tokens = 0;  // k: drafts verified per step (each decode computes 1 + k tokens)
  // ngram (prompt lookup): the longest n-gram in [min, max] that ends the sequence and occurred earlier in it.
  int32_t prompt_lookup_min = 5;
  int32_t prompt_lookup_max = 5;
  // draft_model: a smaller model with the target's vocabulary. deepseek_mtp: the checkpoint holding the
  // multi-token prediction layer, the target's own (the commands fill it in when "model" is not given). eagle3: the
  // EAGLE-3 head's directory.
  std::filesystem::path draft_model_dir;
  // vLLM's "quantization": "fp8" quantizes the drafter's unquantized weights to block FP8 as they load, as
  // --quantization does the target's. Not given: see drafter_quantization.
  std::optional<OnlineQuantization> quantization;
};

// How the drafter loads: as "quantization" says where given; else a multi-token prediction layer (part of the
// target's checkpoint) as the target (vLLM: "--quantization fp8 with a bf16 checkpoint"), and a draft model or an
// EAGLE-3 head as stored.
OnlineQuantization drafter_quantization(const SpeculativeConfig& config, OnlineQuantization target);

// The most drafts a step verifies per sequence (vLLM allows more, but acceptance falls off long before).
constexpr int32_t kMaxSpeculativeTokens = 16;

// Parses vLLM's JSON object: "method" ("ngram"; "draft_model", implied by "model"; "deepseek_mtp", or "mtp" as
// newer vLLM names it; "eagle3", with "model"), "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
// "model", "quantization" ("fp8", "none" or null). Throws tern::Error naming the bad key or value.
SpeculativeConfig parse_speculative_config(std::string_view json_text);

std::string_view speculative_method_name(SpeculativeMethod method);

}  // namespace tern
