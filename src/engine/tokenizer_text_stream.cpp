#include "engine/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace tern {

namespace {

class TokenizerTextStream : public TextStream {
 public:
  TokenizerTextStream(std::shared_ptr<const Tokenizer> tokenizer, bool skip_special_tokens)
      : tokenizer_(std::move(tokenizer)), detokenizer_(*tokenizer_, skip_special_tokens) {}
  std::string push(int32_t token_id) override { return detokenizer_.push(token_id); }
  std::string flush() override { return detokenizer_.flush(); }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;  // outlives detokenizer_, which points into it
  IncrementalDetokenizer detokenizer_;
};

}  // namespace

TextStreamFactory tokenizer_text_streams(const Tokenizer& tokenizer) {
  auto shared = std::make_shared<const Tokenizer>(tokenizer);
  return [shared](bool skip_special_tokens) {
    return std::make_unique<TokenizerTextStream>(shared, skip_special_tokens);
  };
}

}  // namespace tern
