#pragma once
// Turns the engine outputs of one HTTP request (one engine request per prompt) into its response: SSE bytes as
// outputs arrive when streaming, or one JSON body at the end. Pure logic, no I/O: the connection feeds it
// outputs in the order the engine produced them and writes what it returns.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/http_reply.h"
#include "server/request_fields.h"

namespace tern::server {

struct ResponseContext {
  std::string id;          // "cmpl-..." or "chatcmpl-..."
  std::string model_name;  // as served
  int64_t created = 0;     // Unix seconds
  bool stream = false;
  bool include_usage = false;
  int32_t n = 1;            // choices per prompt
  size_t num_prompts = 1;
  bool tokens_as_ids = false;  // logprobs spell tokens "token_id:<id>"
};

class GenerationResponse {
 public:
  explicit GenerationResponse(ResponseContext context);
  virtual ~GenerationResponse() = default;

  bool streaming() const { return context_.stream; }
  // Streaming: the bytes to send before any output (e.g. the assistant role chunks). Empty otherwise.
  virtual std::string start() = 0;
  // Streaming: SSE bytes for this output (possibly empty). Non-streaming: accumulates and returns "".
  std::string on_output(size_t prompt_index, const RequestOutput& output);
  // After every prompt's last output. Streaming: the reply's body holds the remaining bytes (final chunks, usage,
  // [DONE]). Non-streaming: the whole reply, or a 500 error when the engine aborted a request.
  HttpReply finish();
  // Instead of finish(), when the server stops before the engine is done (a drain that ran out of time).
  // Streaming: a last chunk with finish_reason "abort" for every choice still running (as vLLM ends aborted
  // requests), then what finish() sends. Non-streaming: a 503 error.
  HttpReply abort();

  // Summed over the prompts, from their latest outputs.
  Usage usage() const;

 protected:
  virtual std::string handle_output(size_t choice_index, const RequestOutput& output) = 0;
  virtual std::string finish_stream() = 0;  // before the usage chunk and [DONE]
  virtual Json full_response() = 0;
  // A stream chunk: {"id", "object", "created", "model", "choices": [...]} (+ "usage": null when usage is asked).
  Json chunk(const char* object, Json choices) const;
  Json usage_json() const;

  ResponseContext context_;

 private:
  virtual const char* chunk_object() const = 0;

  std::vector<Usage> usage_per_prompt_;
  std::vector<bool> choice_finished_;  // by choice index: its last output (with a finish reason) arrived
  std::string error_;  // the first engine error, when one aborted a request
};

}  // namespace tern::server
