#pragma once
// How a request turns logits into tokens, and when it stops. Plain data; validate() throws a RequestFieldError
// naming the first bad field.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tern::grammar {
class CompiledGrammar;
}

namespace tern {

// The end of a reasoning section in output token ids: `prefix`, then, when `suffix` is not empty, `suffix` starting
// at most `max_tokens_between` tokens after the prefix (gpt-oss harmony: <|channel|>final, then <|message|>, with
// <|constrain|>json or the like between). The think-tag formats need only a prefix (</think>).
struct ReasoningEndMarker {
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
  int32_t max_tokens_between = 0;
};

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (argmax of the penalized, biased logits)
  int32_t top_k = 0;         // keep the k most likely tokens; 0: all
  float top_p = 1.0f;        // keep the smallest most-likely set whose probability reaches top_p
  float min_p = 0.0f;        // drop tokens less likely than min_p times the most likely one
  float repetition_penalty = 1.0f;  // divides positive (multiplies negative) logits of prompt and output tokens
  float frequency_penalty = 0.0f;   // subtracted once per occurrence of a token in the output
  float presence_penalty = 0.0f;    // subtracted once if a token occurs in the output
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id, value added to its logit
  std::optional<uint64_t> seed;  // same seed, same tokens, whatever else runs in the batch
  int32_t n = 1;                 // independent completions sharing the prompt's KV
  // Log-probabilities of the processed logits (penalties, bias and temperature applied, before top-k/p/min-p):
  // nullopt for none, k >= 0 for the sampled token's plus the k most likely.
  std::optional<int32_t> logprobs;
  // Structured output: every sequence's output must match this grammar (compiled against the model's vocabulary,
  // e.g. through a GrammarCache). The mask of allowed tokens is applied before every other processor, EOS is
  // allowed only where the grammar may end, and only EOS once it is complete.
  std::shared_ptr<const grammar::CompiledGrammar> constraint;
  // Set when the output starts in a reasoning section the constraint does not cover (structured outputs with a
  // reasoning parser, as in vLLM and SGLang): until the output has written this marker no mask is applied and the
  // grammar does not advance; it applies from the token after the marker. nullopt: from the first token.
  std::optional<ReasoningEndMarker> constraint_after;

  bool is_greedy() const { return temperature == 0.0f; }
  void validate(int64_t vocab_size) const;
};

struct StopConditions {
  std::optional<int32_t> max_tokens;  // completion tokens per sequence; nullopt: until the context is full
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;  // matched on detokenized text; the text is cut before the match
  bool ignore_eos = false;                // do not stop at the model's EOS tokens
  // Leave special tokens out of the detokenized text (stop strings and the output); output parsers whose markers
  // are special tokens (gpt-oss harmony's <|channel|>...) need them kept.
  bool skip_special_tokens = true;

  void validate(int64_t vocab_size) const;
};

}  // namespace tern
