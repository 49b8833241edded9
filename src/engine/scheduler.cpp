#include "engine/scheduler.h"

#include <algorithm>
#include <limits>
#include <random>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "engine/sampler.h"

namespace tern {

namespace {

bool contains(const std::vector<int32_t>& ids, int32_t id) { return std::find(ids.begin(), ids.end(), id) != ids.end(); }

// Where a sequence stands in the admission order (smaller: sooner); preemption picks the latest.
std::tuple<int32_t, bool, int64_t, uint64_t, int32_t> admission_key(const Sequence& seq, SchedulingPolicy policy) {
  const int32_t priority = policy == SchedulingPolicy::kPriority ? seq.request->request.priority : 0;
  return {priority, !seq.queued_holding_blocks, seq.admission_turn, seq.request->arrival, seq.index};
}

}  // namespace

bool Scheduler::WaitingOrder::operator()(const Sequence* a, const Sequence* b) const {
  return admission_key(*a, policy) < admission_key(*b, policy);
}

Scheduler::Scheduler(SchedulerConfig config, KvCacheManager& kv, TextStreamFactory text_streams)
    : Scheduler(std::move(config), std::vector<KvCacheManager*>{&kv}, std::move(text_streams)) {}

Scheduler::Scheduler(SchedulerConfig config, std::vector<KvCacheManager*> rank_kvs, TextStreamFactory text_streams)
    : config_(std::move(config)),
      kvs_(std::move(rank_kvs)),
      text_streams_(std::move(text_streams)),
      waiting_(WaitingOrder{config_.policy}) {
  if (kvs_.empty()) fail("scheduler: needs a KV cache manager");
  if (config_.max_num_batched_tokens < 1) fail("scheduler: max_num_batched_tokens must be >= 1");
  if (config_.max_num_seqs < 1) fail("scheduler: max_num_seqs must be >= 1");
  if (config_.max_model_len < 2) fail("scheduler: max_model_len {} must be >= 2", config_.max_model_len);
}

Scheduler::~Scheduler() {
  for (auto& [id, seq] : sequences_) kv(*seq).free(seq->blocks);
}

void Scheduler::validate(const GenerateRequest& request) const {
  const int64_t prompt_len = static_cast<int64_t>(request.prompt_token_ids.size());
  if (prompt_len == 0) fail("request: the prompt is empty");
  if (prompt_len >= config_.max_model_len) {
    fail("request: prompt of {} tokens leaves no room to generate within the context of {}", prompt_len,
         config_.max_model_len);
  }
  if (kvs_[0]->max_blocks_held(prompt_len + 1) > kvs_[0]->num_blocks()) {
    fail("request: prompt of {} tokens needs {} KV blocks but the cache has {} of {} tokens; give the KV cache more "
         "memory", prompt_len, kvs_[0]->max_blocks_held(prompt_len + 1), kvs_[0]->num_blocks(), kvs_[0]->block_size());
  }
  if (!request.stop.stop_strings.empty() && !text_streams_) {
    fail("request: stop strings need detokenized text, and this engine runs without a tokenizer");
  }
}

Sequence& Scheduler::new_sequence(RequestState& request, int32_t index) {
  auto seq = std::make_unique<Sequence>();
  seq->id = next_sequence_id_++;
  seq->request = &request;
  seq->index = index;
  seq->admission_turn = (*request.group_num_queued)++;
  seq->seed = derive_seed(*request.seed, static_cast<uint64_t>(index));
  seq->token_ids = request.request.prompt_token_ids;
  seq->num_prompt_tokens = static_cast<int32_t>(seq->token_ids.size());
  if (text_streams_) seq->text_stream = text_streams_(request.request.stop.skip_special_tokens);
  if (!request.request.stop.stop_strings.empty()) seq->stop_matcher.emplace(request.request.stop.stop_strings);
  Sequence& ref = *seq;
  request.sequences.push_back(&ref);
  sequences_.emplace(ref.id, std::move(seq));
  return ref;
}

void Scheduler::add_request(uint64_t request_id, GenerateRequest request) {
  validate(request);
  if (requests_.count(request_id)) fail("scheduler: request id {} is already in use", request_id);
  auto state = std::make_unique<RequestState>();
  state->id = request_id;
  state->arrival = next_arrival_++;
  const int64_t room = config_.max_model_len - static_cast<int64_t>(request.prompt_token_ids.size());
  state->max_output_tokens =
      static_cast<int32_t>(std::min<int64_t>(request.stop.max_tokens.value_or(std::numeric_limits<int32_t>::max()), room));
  state->seed = request.sampling.seed ? *request.sampling.seed : (static_cast<uint64_t>(std::random_device{}()) << 32 |
                                                                   std::random_device{}());
  const uint64_t group = request.admission_group;
  if (group == 0) {
    state->group_num_queued = std::make_shared<int64_t>(0);
  } else {
    std::weak_ptr<int64_t>& shared = admission_groups_[group];
    state->group_num_queued = shared.lock();
    if (!state->group_num_queued) shared = state->group_num_queued = std::make_shared<int64_t>(0);
  }
  state->request = std::move(request);
  RequestState& ref = *state;
  requests_.emplace(request_id, std::move(state));
  waiting_.insert(&new_sequence(ref, 0));
}

std::vector<uint64_t> Scheduler::unfinished_request_ids() const {
  std::vector<uint64_t> ids;
  for (const auto& [id, request] : requests_) ids.push_back(id);
  return ids;
}

std::vector<DraftRequest> Scheduler::draft_requests(int32_t max_draft_tokens) const {
  std::vector<DraftRequest> requests;
  for (const Sequence* seq : running_) {
    const int32_t room = std::min(this->max_draft_tokens(*seq), max_draft_tokens);
    if (room > 0) {
      requests.push_back({seq->id, seq->token_ids, seq->num_prompt_tokens, room, seq->num_tokens_in_flight > 0});
    }
  }
  return requests;
}

std::span<const int32_t> Scheduler::token_ids(uint64_t sequence_id) const {
  const auto it = sequences_.find(sequence_id);
  if (it == sequences_.end() || it->second->status == SequenceStatus::kFinished) return {};
  return it->second->token_ids;
}

int32_t Scheduler::max_draft_tokens(const Sequence& seq) const {
  if (seq.num_uncomputed_tokens() != 1 || seq.num_tokens_in_flight > 1 || seq.num_draft_tokens_in_flight > 0) return 0;
  // The step's own token is one more output; each kept draft another.
  return std::max(0, seq.request->max_output_tokens - (seq.num_tokens() - seq.num_prompt_tokens) - 1);
}

StepPlan Scheduler::schedule(const DraftTokens& drafts) {
  StepPlan plan;
  plan.step = static_cast<uint64_t>(counters_.num_steps++);
  plan.finished_sequence_ids = std::move(finished_since_plan_);
  finished_since_plan_.clear();
  int32_t budget = config_.max_num_batched_tokens;
  // Admitting new work in a step that had to preempt would only preempt again.
  if (!schedule_running(plan, budget, drafts)) schedule_waiting(plan, budget);
  // The tier copies decided since the last plan (prefix hits loaded from the host, evictions written back, and
  // update()'s write-through copies) run before this step's compute.
  for (KvCacheManager* kv : kvs_) plan.kv_tier_copies.push_back(kv->take_tier_copies());
  return plan;
}

bool Scheduler::schedule_running(StepPlan& plan, int32_t& budget, const DraftTokens& drafts) {
  bool preempted = false;
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Sequence& seq = *running_[i];
    // Nothing past a token certain to end the sequence is ever computed (update() finishes it when it arrives),
    // and nothing after a verify chunk until update() knows how many of its drafts were kept.
    if (ends_with_token_in_flight(seq) || seq.num_draft_tokens_in_flight > 0) {
      ++i;
      continue;
    }
    // allocate() releases the blocks that slid out of a window: offer them to the prefix cache first. update() did
    // when the previous step was applied before this schedule; with overlap scheduling that step is in flight.
    cache_known_blocks(seq);
    const int32_t limit = chunk_limit(seq, budget);
    const int32_t num_new = std::min(seq.num_uncomputed_tokens(), limit);
    std::span<const int32_t> draft_ids;
    if (const auto it = drafts.find(seq.id); it != drafts.end() && num_new == 1) {
      const int32_t room = std::max(0, std::min(max_draft_tokens(seq), limit - num_new));
      draft_ids = std::span<const int32_t>(it->second).first(std::min<size_t>(it->second.size(), room));
    }
    // Drafts take free blocks only: where they do not fit, the step decodes one token (and preempts for that alone).
    if (!draft_ids.empty() &&
        kv(seq).allocate(seq.blocks, seq.num_computed_tokens,
                         static_cast<int64_t>(seq.num_computed_tokens) + num_new + static_cast<int64_t>(draft_ids.size()))) {
      emit_chunk(plan, seq, num_new, draft_ids);
      budget -= num_new + static_cast<int32_t>(draft_ids.size());
      ++i;
      continue;
    }
    bool preempted_self = false;
    const int64_t end = static_cast<int64_t>(seq.num_computed_tokens) + num_new;
    while (!kv(seq).allocate(seq.blocks, seq.num_computed_tokens, end)) {
      const size_t victim = pick_victim(i);
      preempt(victim);
      preempted = true;
      if (victim == i) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) continue;  // running_[i] is now the next sequence
    emit_chunk(plan, seq, num_new);
    budget -= num_new;
    ++i;
  }
  return preempted;
}

void Scheduler::schedule_waiting(StepPlan& plan, int32_t& budget) {
  while (!waiting_.empty() && budget > 0 && static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    Sequence& seq = **waiting_.begin();
    // A sequence preempted with a token in flight waits for it before it recomputes (update() comes first).
    if (seq.num_tokens_in_flight > 0) break;
    // A fork arrives holding its prompt's shared blocks; anything else looks its prefix up in the cache.
    const bool matched_now = seq.blocks.num_blocks() == 0;
    if (matched_now) seq.num_computed_tokens = match_prefix_on_best_rank(seq);
    const int32_t remaining = seq.num_uncomputed_tokens();
    const int32_t num_new = std::min(remaining, chunk_limit(seq, budget));
    // Without chunked prefill a prompt waits for a step with room for all of it, unless it exceeds any step.
    const bool whole_or_alone = num_new == remaining || budget == config_.max_num_batched_tokens;
    if ((!config_.enable_chunked_prefill && !whole_or_alone) ||
        !kv(seq).allocate(seq.blocks, seq.num_computed_tokens,
                          static_cast<int64_t>(seq.num_computed_tokens) + num_new)) {
      if (matched_now) {
        kv(seq).free(seq.blocks);
        seq.num_computed_tokens = 0;
      }
      break;
    }
    if (matched_now) {
      kv(seq).record_prefix_query(static_cast<int64_t>(seq.token_ids.size()), seq.num_computed_tokens);
      if (seq.index == 0 && !seq.request->num_cached_tokens) seq.request->num_cached_tokens = seq.num_computed_tokens;
    }
    waiting_.erase(waiting_.begin());
    seq.queued_holding_blocks = false;
    seq.rank_fixed = true;
    seq.status = SequenceStatus::kRunning;
    running_.push_back(&seq);
    emit_chunk(plan, seq, num_new);
    budget -= num_new;
  }
}

int32_t Scheduler::match_prefix_on_best_rank(Sequence& seq) {
  if (seq.rank_fixed || kvs_.size() == 1) return kv(seq).match_prefix(seq.blocks, seq.token_ids);
  std::vector<RankLoad> loads(kvs_.size());
  for (const Sequence* running : running_) ++loads[static_cast<size_t>(running->rank)].num_running;
  for (size_t r = 0; r < kvs_.size(); ++r) {
    loads[r].num_available_blocks = kvs_[r]->num_available_blocks();
    loads[r].num_cached_tokens = kvs_[r]->cached_prefix_tokens(seq.token_ids);
  }
  seq.rank = pick_data_parallel_rank(loads);
  return kv(seq).match_prefix(seq.blocks, seq.token_ids);
}

bool Scheduler::ends_with_token_in_flight(const Sequence& seq) const {
  if (seq.num_tokens_in_flight == 0) return false;
  // The conditions of append_token's kLength finish, known before the token's id.
  const int32_t num_tokens = seq.num_tokens();
  return num_tokens - seq.num_prompt_tokens >= seq.request->max_output_tokens ||
         kv(seq).max_blocks_held(static_cast<int64_t>(num_tokens)) > kv(seq).num_blocks();
}

void Scheduler::cache_known_blocks(Sequence& seq) {
  // Only blocks of known tokens: with overlap scheduling the last computed token may still be in flight.
  kv(seq).cache_blocks(seq.blocks, seq.token_ids,
                       std::min(seq.num_computed_tokens, static_cast<int32_t>(seq.token_ids.size())));
}

int32_t Scheduler::chunk_limit(const Sequence& seq, int32_t budget) const {
  const int64_t fitting = kv(seq).max_tokens_held(seq.num_computed_tokens) - seq.num_computed_tokens;
  return static_cast<int32_t>(std::min<int64_t>(budget, fitting));
}

void Scheduler::emit_chunk(StepPlan& plan, Sequence& seq, int32_t num_new_tokens, std::span<const int32_t> draft_ids) {
  if (!seq.known_to_runner) {
    plan.new_sequences.push_back({seq.id, seq.request->request.sampling, seq.seed,
                                  std::vector<int32_t>(seq.token_ids.begin(), seq.token_ids.begin() + seq.num_prompt_tokens)});
    seq.known_to_runner = true;
  }
  ScheduledChunk chunk;
  chunk.sequence_id = seq.id;
  chunk.rank = seq.rank;
  chunk.num_cached_tokens = seq.num_computed_tokens;
  chunk.num_prompt_tokens = seq.num_prompt_tokens;
  const int32_t end = seq.num_computed_tokens + num_new_tokens;
  const auto num_known = static_cast<int32_t>(seq.token_ids.size());
  // At most the first token past the known ones is in flight when a step is scheduled (the previous step's).
  if (end > num_known + 1) {
    fail("scheduler: sequence {} scheduled to token {} with {} tokens known", seq.id, end, num_known);
  }
  chunk.token_ids.assign(seq.token_ids.begin() + seq.num_computed_tokens, seq.token_ids.begin() + std::min(end, num_known));
  if (end > num_known) chunk.token_ids.push_back(kTokenInFlight);
  chunk.block_tables = seq.blocks.tables;
  seq.num_computed_tokens = end;
  chunk.sample = end == seq.num_tokens();
  if (chunk.sample) ++seq.num_tokens_in_flight;
  if (!draft_ids.empty()) {
    if (!chunk.sample) fail("scheduler: drafts for sequence {}, whose chunk does not reach its end", seq.id);
    chunk.token_ids.insert(chunk.token_ids.end(), draft_ids.begin(), draft_ids.end());
    chunk.num_draft_tokens = static_cast<int32_t>(draft_ids.size());
    seq.num_draft_tokens_in_flight = chunk.num_draft_tokens;
  }
  counters_.num_computed_tokens += num_new_tokens + static_cast<int64_t>(draft_ids.size());
  plan.chunks.push_back(std::move(chunk));
}

size_t Scheduler::pick_victim(size_t first) const {
  size_t victim = first;
  for (size_t i = first + 1; i < running_.size(); ++i) {
    if (running_[i]->rank == running_[first]->rank &&
        admission_key(*running_[i], config_.policy) > admission_key(*running_[victim], config_.policy)) {
      victim = i;
    }
  }
  return victim;
}

void Scheduler::preempt(size_t running_index) {
  Sequence& seq = *running_[running_index];
  kv(seq).free(seq.blocks);
  seq.num_computed_tokens = 0;
  seq.status = SequenceStatus::kWaiting;
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(running_index));
  waiting_.insert(&seq);
  ++counters_.num_preemptions;
}

void Scheduler::fork(Sequence& first) {
  RequestState& request = *first.request;
  request.forked = true;
  // Whole blocks of the prompt, leaving each fork at least one prompt token to compute for its own first sample.
  // A first sequence preempted before its first token arrived holds no blocks to share.
  const int32_t max_shared_blocks =
      std::min((first.num_prompt_tokens - 1) / kv(first).block_size(), first.blocks.num_blocks());
  for (int32_t index = 1; index < request.request.sampling.n; ++index) {
    Sequence& fork = new_sequence(request, index);
    // Its shared blocks are in the first sequence's rank's cache.
    fork.rank = first.rank;
    fork.rank_fixed = true;
    fork.blocks = kv(first).fork(first.blocks, max_shared_blocks);
    fork.num_computed_tokens = fork.blocks.num_blocks() * kv(first).block_size();
    fork.queued_holding_blocks = fork.blocks.num_blocks() > 0;
    waiting_.insert(&fork);
  }
}

std::vector<RequestOutput> Scheduler::update(const StepPlan& plan, const StepResult& result) {
  for (const auto& chunk : plan.chunks) {
    const auto it = sequences_.find(chunk.sequence_id);
    if (it == sequences_.end() || it->second->status != SequenceStatus::kRunning) continue;
    cache_known_blocks(*it->second);
  }
  std::unordered_map<uint64_t, int32_t> num_drafts;  // of the plan's verify chunks
  for (const auto& chunk : plan.chunks) {
    if (chunk.num_draft_tokens > 0) num_drafts.emplace(chunk.sequence_id, chunk.num_draft_tokens);
  }
  std::vector<RequestOutput> outputs;
  outputs.reserve(result.tokens.size());
  const std::span<const SampledToken> tokens = result.tokens;
  for (size_t first = 0; first < tokens.size();) {
    // A sequence's tokens of this step: one, or a verify chunk's kept drafts and the token after them.
    size_t end = first + 1;
    while (end < tokens.size() && tokens[end].sequence_id == tokens[first].sequence_id) ++end;
    const auto samples = tokens.subspan(first, end - first);
    first = end;
    const auto it = sequences_.find(samples.front().sequence_id);
    // A finished sequence's token was computed past its end (overlap scheduling): dropped. A sequence preempted
    // after this step was scheduled keeps its token (it is waiting now).
    if (it == sequences_.end() || it->second->status == SequenceStatus::kFinished) continue;
    Sequence& seq = *it->second;
    if (seq.num_tokens_in_flight == 0) fail("scheduler: a token for sequence {}, which has none in flight", seq.id);
    --seq.num_tokens_in_flight;
    // With overlap scheduling a verify chunk may be in flight behind this step's one-token chunk of the sequence.
    if (const auto verified = num_drafts.find(seq.id); verified != num_drafts.end()) {
      settle_drafts(seq, verified->second, static_cast<int32_t>(samples.size()));
    } else if (samples.size() != 1) {
      fail("scheduler: {} tokens for sequence {}, which verified no drafts", samples.size(), seq.id);
    }
    // Tokens after one that ends the sequence (EOS, a stop string, max_tokens) are dropped, as in one-token steps.
    for (const auto& sample : samples) {
      if (seq.status == SequenceStatus::kFinished) break;
      outputs.push_back(append_token(seq, sample));
    }
  }
  remove_finished_requests();
  return outputs;
}

void Scheduler::settle_drafts(Sequence& seq, int32_t num_drafts, int32_t num_tokens_returned) {
  const int32_t num_accepted = num_tokens_returned - 1;
  if (num_drafts != seq.num_draft_tokens_in_flight || num_accepted < 0 || num_accepted > num_drafts) {
    fail("scheduler: {} tokens for sequence {}, which verified {} drafts ({} in flight)", num_tokens_returned, seq.id,
         num_drafts, seq.num_draft_tokens_in_flight);
  }
  seq.num_draft_tokens_in_flight = 0;
  RequestState& request = *seq.request;
  ++request.num_spec_drafts;
  request.num_spec_draft_tokens += num_drafts;
  request.num_spec_accepted_tokens += num_accepted;
  ++counters_.num_spec_drafts;
  counters_.num_spec_draft_tokens += num_drafts;
  counters_.num_spec_accepted_tokens += num_accepted;
  auto& per_pos = counters_.num_spec_accepted_tokens_per_pos;
  if (per_pos.size() < static_cast<size_t>(num_drafts)) per_pos.resize(static_cast<size_t>(num_drafts), 0);
  for (int32_t pos = 0; pos < num_accepted; ++pos) ++per_pos[static_cast<size_t>(pos)];
  // A sequence preempted meanwhile holds no blocks and recomputes from its tokens.
  if (seq.status != SequenceStatus::kRunning) return;
  // The last token and the kept drafts have their KV now; the rejected drafts' slots are given back (blocks past
  // the computed tokens), so the prefix cache, which takes only full blocks of computed known tokens, never
  // holds a rejected draft.
  seq.num_computed_tokens += num_accepted;
  kv(seq).truncate(seq.blocks, seq.num_computed_tokens);
}

RequestOutput Scheduler::append_token(Sequence& seq, const SampledToken& sample) {
  RequestState& request = *seq.request;
  if (!request.forked && request.request.sampling.n > 1) fork(seq);
  const int32_t token = sample.token_id;
  seq.token_ids.push_back(token);
  ++request.num_completion_tokens;
  ++counters_.num_generated_tokens;

  RequestOutput output;
  output.request_id = request.id;
  output.index = seq.index;
  output.token_ids.push_back(token);
  if (sample.logprob) output.logprobs.push_back(*sample.logprob);

  const StopConditions& stop = request.request.stop;
  if (contains(stop.stop_token_ids, token) || (!stop.ignore_eos && contains(config_.eos_token_ids, token))) {
    finish(seq, FinishReason::kStop, true, output);
  } else {
    bool stopped_by_string = false;
    if (seq.text_stream) {
      std::string delta = seq.text_stream->push(token);
      if (seq.stop_matcher) {
        auto matched = seq.stop_matcher->push(delta);
        output.text = std::move(matched.text);
        stopped_by_string = matched.stopped;
      } else {
        output.text = std::move(delta);
      }
    }
    if (stopped_by_string) {
      finish(seq, FinishReason::kStop, false, output);
    } else if (seq.num_output_tokens() >= request.max_output_tokens ||
               kv(seq).max_blocks_held(static_cast<int64_t>(seq.token_ids.size())) > kv(seq).num_blocks()) {
      // The second condition: the next token's KV would not fit even in an empty pool.
      finish(seq, FinishReason::kLength, true, output);
    }
  }
  output.usage = usage(request);
  return output;
}

void Scheduler::finish(Sequence& seq, FinishReason reason, bool flush_text, RequestOutput& output) {
  if (flush_text && seq.text_stream) {
    std::string rest = seq.text_stream->flush();
    if (seq.stop_matcher) {
      auto matched = seq.stop_matcher->push(rest);
      output.text += matched.text;
      if (matched.stopped) reason = FinishReason::kStop;
      else output.text += seq.stop_matcher->flush();
    } else {
      output.text += rest;
    }
  }
  kv(seq).free(seq.blocks);
  if (seq.status == SequenceStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), &seq));
  } else if (seq.status == SequenceStatus::kWaiting) {
    waiting_.erase(&seq);
  }
  seq.status = SequenceStatus::kFinished;
  if (seq.known_to_runner) finished_since_plan_.push_back(seq.id);
  output.finish_reason = reason;
  count_finished(*seq.request, output);
}

void Scheduler::count_finished(RequestState& request, RequestOutput& output) {
  if (++request.num_finished_sequences == request.request.sampling.n) {
    output.request_finished = true;
    ++counters_.num_finished_requests;
    finished_requests_.push_back(request.id);
  }
}

void Scheduler::remove_finished_requests() {
  for (uint64_t id : finished_requests_) {
    const auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    for (Sequence* seq : it->second->sequences) sequences_.erase(seq->id);
    const uint64_t group = it->second->request.admission_group;
    requests_.erase(it);
    if (group != 0 && admission_groups_[group].expired()) admission_groups_.erase(group);
  }
  finished_requests_.clear();
}

Usage Scheduler::usage(const RequestState& request) const {
  return {static_cast<int32_t>(request.request.prompt_token_ids.size()), request.num_cached_tokens.value_or(0),
          request.num_completion_tokens, request.num_spec_drafts, request.num_spec_draft_tokens,
          request.num_spec_accepted_tokens};
}

std::vector<RequestOutput> Scheduler::abort(uint64_t request_id, const std::string& error) {
  std::vector<RequestOutput> outputs;
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) return outputs;
  RequestState& request = *it->second;
  for (int32_t index = 0; index < request.request.sampling.n; ++index) {
    RequestOutput output;
    output.request_id = request_id;
    output.index = index;
    output.error = error;
    if (index < static_cast<int32_t>(request.sequences.size())) {
      Sequence& seq = *request.sequences[index];
      if (seq.status == SequenceStatus::kFinished) continue;
      finish(seq, FinishReason::kAbort, false, output);
    } else {
      // A fork that was never created: nothing to free.
      output.finish_reason = FinishReason::kAbort;
      count_finished(request, output);
    }
    outputs.push_back(std::move(output));
  }
  for (auto& output : outputs) output.usage = usage(request);
  remove_finished_requests();
  return outputs;
}

}  // namespace tern
