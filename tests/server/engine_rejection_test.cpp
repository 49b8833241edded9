// An engine's refusal of a submitted request becomes a 400 naming the parameter the client got wrong.
#include <gtest/gtest.h>

#include "engine/request_field_error.h"
#include "engine/sampling_params.h"
#include "server/openai_api.h"

namespace tern::server {
namespace {

PreparedGeneration generation(size_t num_prompts, std::string prompt_param) {
  PreparedGeneration g;
  g.requests.resize(num_prompts);
  g.prompt_param = std::move(prompt_param);
  return g;
}

// The field as the engine's own validation names it.
RequestFieldError engine_error(auto&& invalidate) {
  SamplingParams sampling;
  StopConditions stop;
  invalidate(sampling, stop);
  try {
    sampling.validate(100);
    stop.validate(100);
  } catch (const RequestFieldError& e) {
    return e;
  }
  ADD_FAILURE() << "the engine accepted the request";
  return RequestFieldError("", "");
}

TEST(EngineRejectionTest, NamesTheFieldTheEngineNamed) {
  const auto g = generation(1, "prompt");
  const ApiError top_p = g.rejection(engine_error([](auto& s, auto&) { s.top_p = static_cast<float>(1e-50); }), 0);
  EXPECT_EQ(top_p.status(), 400);
  EXPECT_EQ(top_p.param(), "top_p");
  EXPECT_NE(std::string(top_p.what()).find("top_p"), std::string::npos) << top_p.what();
  EXPECT_EQ(g.rejection(engine_error([](auto& s, auto&) { s.logit_bias = {{100, 1.0f}}; }), 0).param(), "logit_bias");
  EXPECT_EQ(g.rejection(engine_error([](auto&, auto& t) { t.stop_token_ids = {100}; }), 0).param(), "stop_token_ids");
  EXPECT_EQ(g.rejection(engine_error([](auto&, auto& t) { t.stop_strings = {""}; }), 0).param(), "stop");
}

TEST(EngineRejectionTest, OtherRefusalsAreAboutThePrompt) {
  EXPECT_EQ(generation(1, "messages").rejection(Error("the prompt is too long"), 0).param(), "messages");
  EXPECT_EQ(generation(1, "prompt").rejection(RequestFieldError("prompt_token_ids", "bad id"), 0).param(), "prompt");
  EXPECT_EQ(generation(3, "prompt").rejection(RequestFieldError("prompt_token_ids", "bad id"), 2).param(), "prompt[2]");
  EXPECT_EQ(generation(3, "prompt").rejection(RequestFieldError("top_p", "bad"), 2).param(), "top_p");
}

}  // namespace
}  // namespace tern::server
