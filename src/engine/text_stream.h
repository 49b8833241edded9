#pragma once
// Turns a sequence's tokens into text as they arrive. The engine works without one (token ids only); stop
// strings need one. Injected as a factory so the engine does not depend on a tokenizer.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace tern {

class Tokenizer;

class TextStream {
 public:
  virtual ~TextStream() = default;
  // The text the token completes (possibly empty while a character is incomplete).
  virtual std::string push(int32_t token_id) = 0;
  // Whatever is still held back, at the end of the sequence.
  virtual std::string flush() = 0;
};

// Makes a sequence's stream; `skip_special_tokens` is its request's StopConditions::skip_special_tokens.
using TextStreamFactory = std::function<std::unique_ptr<TextStream>(bool skip_special_tokens)>;

// Incremental detokenization with `tokenizer` (copied; copies share the model).
TextStreamFactory tokenizer_text_streams(const Tokenizer& tokenizer);

}  // namespace tern
