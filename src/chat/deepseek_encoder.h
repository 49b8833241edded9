#pragma once
// DeepSeek-V3.2 and DeepSeek-V4 checkpoints ship no Jinja chat template: their prompts come from DeepSeek's Python
// encoders (encoding/encoding_dsv32.py, encoding/encoding_dsv4.py). This reproduces them byte for byte
// (tests/chat/deepseek_encoder_test.cpp checks it against the references' own output):
//   <｜begin▁of▁sentence｜>{system}[tools][response format]<｜User｜>{user}<｜Assistant｜><think> or </think>
//   {reasoning}</think>{content}[\n\n<｜DSML｜function_calls or tool_calls>...]<｜end▁of▁sentence｜>...
// V3.2 renders tool results as <function_results><result>...</result></function_results> after the assistant
// turn; V4 merges them into the next user turn as <tool_result>...</tool_result> blocks (in call order), names
// the DSML block tool_calls instead of function_calls, keeps all reasoning when any message carries tools, has a
// latest_reminder role and a "max" reasoning-effort preamble. Neither renders DeepSeek's internal "task" tokens.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace tern::chat {

struct ChatTemplateInput;

enum class DeepSeekEncoding { kV32, kV4 };

struct DeepSeekEncodeOptions {
  bool thinking = false;       // the reference's thinking_mode "thinking" (else "chat")
  bool drop_thinking = true;   // drop the reasoning of turns before the last user message
  std::optional<std::string> reasoning_effort;  // V4 only: "max" or "high"
};

// The reference's encode_messages(messages, ...) with its default BOS. `messages` are as the reference takes
// them: OpenAI messages whose system (or developer) message may carry "tools" and "response_format"; tool-call
// arguments may be JSON text or an object. Throws tern::Error where the reference refuses the conversation.
std::string encode_deepseek_messages(DeepSeekEncoding encoding, const nlohmann::ordered_json& messages,
                                     const DeepSeekEncodeOptions& options);

// An OpenAI chat request rendered with the encoder, as the serving engines do: the request's tools and its
// response_format's JSON schema go on the leading system message (one is inserted when the conversation has
// none); chat_template_kwargs "thinking" (DeepSeek's key) or "enable_thinking" turn thinking on, "drop_thinking"
// and (V4) "reasoning_effort" pass through. Throws tern::Error naming a kwarg of the wrong type.
std::string render_deepseek_chat(DeepSeekEncoding encoding, const ChatTemplateInput& input);

// The encoding a model directory's config.json names (model_type "deepseek_v32" / "deepseek_v4", or the
// architectures DeepseekV32ForCausalLM / DeepseekV4ForCausalLM); nullopt for any other model or no config.json.
std::optional<DeepSeekEncoding> deepseek_encoding_of_model_dir(const std::filesystem::path& dir);

}  // namespace tern::chat
