#include "cli/bench_multi_turn.h"

#include <chrono>
#include <deque>
#include <optional>
#include <random>
#include <unordered_map>
#include <vector>

#include "cli/bench_prompts.h"
#include "core/error.h"

namespace tern::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Conversation {
  std::vector<std::vector<int32_t>> user_messages;  // one per turn, drawn before the run
  std::vector<int32_t> history;                     // the prompts and replies so far
  int64_t num_turns_submitted = 0;
};

struct TurnInFlight {
  int64_t conversation = 0;
  int64_t turn = 0;  // from 0
  double submit_s = 0.0;
  std::optional<double> first_output_s;
  double last_output_s = 0.0;
  std::vector<int32_t> reply;
};

struct FinishedTurn {
  int64_t turn = 0;
  double ttft_s = 0.0;
  double latency_s = 0.0;  // submission to the last output
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;
};

nlohmann::json section(const MultiTurnConfig& config, const std::vector<FinishedTurn>& turns, const EngineCore& core) {
  std::vector<double> later_ttft_s, latency_s;
  std::vector<std::vector<double>> ttft_s_by_turn(config.num_turns);
  std::vector<int64_t> prompt_tokens_by_turn(config.num_turns), cached_tokens_by_turn(config.num_turns);
  int64_t prompt_tokens = 0, cached_tokens = 0;
  for (const auto& turn : turns) {
    if (turn.turn > 0) later_ttft_s.push_back(turn.ttft_s);
    latency_s.push_back(turn.latency_s);
    ttft_s_by_turn[turn.turn].push_back(turn.ttft_s);
    prompt_tokens_by_turn[turn.turn] += turn.prompt_tokens;
    cached_tokens_by_turn[turn.turn] += turn.cached_tokens;
    prompt_tokens += turn.prompt_tokens;
    cached_tokens += turn.cached_tokens;
  }
  const auto hit_rate = [](int64_t prompt, int64_t cached) {
    return prompt > 0 ? static_cast<double>(cached) / prompt : 0.0;
  };
  nlohmann::json ttft_p50_ms = nlohmann::json::array(), hit_rate_by_turn = nlohmann::json::array();
  for (int64_t t = 0; t < config.num_turns; ++t) {
    ttft_p50_ms.push_back(latency_summary_ms(ttft_s_by_turn[t])["p50"]);
    hit_rate_by_turn.push_back(hit_rate(prompt_tokens_by_turn[t], cached_tokens_by_turn[t]));
  }
  const int64_t last_turn_len = config.num_turns * (config.input_len + config.output_len);
  return {
      {"conversations", config.num_conversations},
      {"turns", config.num_turns},
      {"max_concurrency", config.max_concurrency},
      {"requests", turns.size()},
      {"ttft_ms_turns_2_on", latency_summary_ms(later_ttft_s)},
      {"latency_ms", latency_summary_ms(latency_s)},
      // Index t: the conversations' turn t + 1.
      {"per_turn",
       {{"ttft_ms_p50", ttft_p50_ms},
        {"prompt_tokens", prompt_tokens_by_turn},
        {"cached_tokens", cached_tokens_by_turn},
        {"prefix_hit_rate", hit_rate_by_turn}}},
      // What the engine reported per request (Usage::cached_tokens: prompt tokens whose KV the prefix cache held).
      {"prefix_cache",
       {{"prompt_tokens", prompt_tokens},
        {"cached_tokens", cached_tokens},
        {"hit_rate", hit_rate(prompt_tokens, cached_tokens)}}},
      // Whether the conversations' KV outgrew the device pool: the working set is every conversation at its end.
      {"kv_pool_tokens", core.kv_budget().num_tokens()},
      {"working_set_tokens", config.num_conversations * last_turn_len},
  };
}

}  // namespace

MultiTurnRun run_multi_turn(EngineCore& core, const MultiTurnConfig& config, int64_t vocab_size) {
  const int64_t last_turn_len = config.num_turns * (config.input_len + config.output_len);
  if (last_turn_len > core.max_model_len()) {
    fail("bench: a conversation of --num-turns {} turns of --input-len {} + --output-len {} tokens reaches {} tokens, "
         "more than the engine's context of {} tokens",
         config.num_turns, config.input_len, config.output_len, last_turn_len, core.max_model_len());
  }
  std::mt19937 rng(config.seed);
  std::vector<Conversation> conversations(config.num_conversations);
  for (auto& conversation : conversations) {
    for (int64_t t = 0; t < config.num_turns; ++t) {
      conversation.user_messages.push_back(random_prompt(rng, config.input_len, vocab_size));
    }
  }

  MultiTurnRun result;
  BenchRun& run = result.run;
  std::vector<FinishedTurn> finished;
  std::deque<int64_t> waiting;  // conversations whose next turn waits for a slot, in the order they will get one
  for (int64_t c = 0; c < config.num_conversations; ++c) waiting.push_back(c);
  std::unordered_map<uint64_t, TurnInFlight> in_flight;
  const auto start = Clock::now();
  const auto now_s = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };

  const auto submit_next_turn = [&](int64_t c) {
    Conversation& conversation = conversations[c];
    const int64_t turn = conversation.num_turns_submitted++;
    const auto& message = conversation.user_messages[turn];
    conversation.history.insert(conversation.history.end(), message.begin(), message.end());
    const auto request_id = static_cast<uint64_t>(c * config.num_turns + turn);
    GenerateRequest request;
    request.prompt_token_ids = conversation.history;
    request.sampling = config.sampling;
    if (request.sampling.seed) request.sampling.seed = *request.sampling.seed + request_id;
    request.stop.max_tokens = static_cast<int32_t>(config.output_len);
    request.stop.ignore_eos = true;  // fixed output lengths
    ++run.num_requests;
    run.num_input_tokens += static_cast<int64_t>(request.prompt_token_ids.size());
    core.add_request(request_id, std::move(request));
    in_flight.emplace(request_id, TurnInFlight{c, turn, now_s(), std::nullopt, 0.0, {}});
  };
  const auto fill_slots = [&] {
    while (static_cast<int64_t>(in_flight.size()) < config.max_concurrency && !waiting.empty()) {
      submit_next_turn(waiting.front());
      waiting.pop_front();
    }
  };

  fill_slots();
  while (core.has_unfinished_requests()) {
    const auto outputs = core.step();
    const double now = now_s();
    const auto& timing = core.last_step_timing();
    run.host_step_s.push_back(timing.schedule_s + timing.update_s);
    for (const auto& out : outputs) {
      TurnInFlight& turn = in_flight.at(out.request_id);
      if (!out.error.empty()) {
        fail("bench: turn {} of conversation {} failed: {}", turn.turn + 1, turn.conversation, out.error);
      }
      if (!out.token_ids.empty()) {
        run.num_output_tokens += static_cast<int64_t>(out.token_ids.size());
        turn.reply.insert(turn.reply.end(), out.token_ids.begin(), out.token_ids.end());
        if (turn.first_output_s) {
          run.itl_s.push_back(now - turn.last_output_s);
        } else {
          turn.first_output_s = now;
          run.ttft_s.push_back(now - turn.submit_s);
        }
        turn.last_output_s = now;
      }
      if (!out.request_finished) continue;
      finished.push_back({turn.turn, turn.first_output_s.value_or(now) - turn.submit_s, now - turn.submit_s,
                          out.usage.prompt_tokens, out.usage.cached_tokens});
      Conversation& conversation = conversations[turn.conversation];
      conversation.history.insert(conversation.history.end(), turn.reply.begin(), turn.reply.end());
      if (conversation.num_turns_submitted < config.num_turns) waiting.push_back(turn.conversation);
      in_flight.erase(out.request_id);
    }
    fill_slots();
  }
  run.duration_s = now_s();
  result.report = section(config, finished, core);
  return result;
}

}  // namespace tern::cli
