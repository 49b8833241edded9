#pragma once
// Speculative decoding settings, read from vLLM's --speculative-config JSON object: which proposer drafts tokens
// and how many a decoding sequence verifies per step.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

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
};

// The most drafts a step verifies per sequence (vLLM allows more, but acceptance falls off long before).
constexpr int32_t kMaxSpeculativeTokens = 16;

// Parses vLLM's JSON object: "method" ("ngram"; "draft_model", implied by "model"; "deepseek_mtp", or "mtp" as
// newer vLLM names it; "eagle3", with "model"), "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max", "model". Throws
// tern::Error naming the bad key or value.
SpeculativeConfig parse_speculative_config(std::string_view json_text);

std::string_view speculative_method_name(SpeculativeMethod method);

}  // namespace tern
