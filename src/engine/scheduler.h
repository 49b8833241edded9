#pragma once
// Continuous batching: each step decides how many tokens every request computes (vLLM v1). Running sequences go
// first (a decode is one token, a prefill chunk up to the step's token budget), then waiting ones are admitted in
// FCFS or priority order, reusing cached prefixes; within a priority, the sequences of a request's n (or of an
// admission group's prompts x n) take turns with those of other requests (Sequence::admission_turn). When the KV
// pool runs dry the running sequence last in that order is preempted: its blocks are freed and it recomputes later
// from its tokens, losing nothing.
// The scheduler works on host data only and hands the model runner a StepPlan.
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/data_parallel_rank.h"
#include "engine/draft_proposer.h"
#include "engine/request.h"
#include "engine/sequence.h"
#include "engine/step_plan.h"
#include "engine/text_stream.h"
#include "kvcache/kv_cache_manager.h"

namespace tern {

enum class SchedulingPolicy { kFcfs, kPriority };

struct SchedulerConfig {
  int32_t max_num_batched_tokens = 2048;  // tokens per step over all sequences
  int32_t max_num_seqs = 256;             // running sequences
  int64_t max_model_len = 0;              // tokens per sequence, prompt included
  bool enable_chunked_prefill = true;     // else a prompt is admitted only when all of it fits one step
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  std::vector<int32_t> eos_token_ids;
};

struct SchedulerCounters {
  int64_t num_preemptions = 0;
  int64_t num_computed_tokens = 0;  // tokens fed to the model: prompts, decodes and recomputation
  int64_t num_generated_tokens = 0;
  int64_t num_finished_requests = 0;
  int64_t num_steps = 0;
  // Speculative decoding (vLLM's spec_decode counters): verify chunks, their draft tokens, the drafts kept, and
  // the drafts kept at each draft position.
  int64_t num_spec_drafts = 0;
  int64_t num_spec_draft_tokens = 0;
  int64_t num_spec_accepted_tokens = 0;
  std::vector<int64_t> num_spec_accepted_tokens_per_pos;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvCacheManager& kv, TextStreamFactory text_streams = {});
  // Data-parallel attention: one KV cache manager per rank (equal sizes), each holding only its sequences' blocks.
  // A sequence goes to the rank pick_data_parallel_rank chooses when first admitted and stays there (Sequence::rank);
  // its chunks carry the rank.
  Scheduler(SchedulerConfig config, std::vector<KvCacheManager*> rank_kvs, TextStreamFactory text_streams = {});
  ~Scheduler();

  // Checks what the scheduler can tell about a request (prompt length against the context and the pool, stop
  // strings needing a detokenizer). Reads only immutable state: safe from any thread.
  void validate(const GenerateRequest& request) const;
  // Queues a request (validated here too); `request_id` must be new.
  void add_request(uint64_t request_id, GenerateRequest request);
  // Finishes every sequence of the request with "abort" and frees its blocks at once; returns the final outputs
  // (none if the request is unknown or already finished).
  std::vector<RequestOutput> abort(uint64_t request_id, const std::string& error = {});

  // The next step. It may be scheduled before the previous step's tokens are applied (overlap scheduling): a
  // sequence whose sampled token is in flight gets a chunk ending in kTokenInFlight, except when that token is
  // certain to end it. Plans are updated in the order they were scheduled, at most one plan behind.
  // Speculative decoding: a sequence in `drafts` whose step is a decode computes its last token (which may be in
  // flight) and the drafts (as many as the budget, the pool and its max_tokens allow), and update() keeps those
  // the sampler accepted. Nothing more is scheduled for the sequence until then.
  StepPlan schedule(const DraftTokens& drafts = {});
  // The running sequences whose next step is a decode with room for drafts, for a proposer of up to
  // `max_draft_tokens` tokens, those whose next token is in flight included (DraftRequest::next_token_in_flight).
  // Their token spans stay valid until the next schedule().
  std::vector<DraftRequest> draft_requests(int32_t max_draft_tokens) const;
  // The sequence's tokens (prompt, then output); empty once it finished. Valid until the next update().
  std::span<const int32_t> token_ids(uint64_t sequence_id) const;
  // Applies the step's sampled tokens: appends them, checks stop conditions, streams outputs, frees finished
  // sequences and offers newly full blocks to the prefix cache. Tokens of sequences that finished meanwhile (EOS,
  // a stop string or an abort known only after the next step was scheduled) are dropped.
  std::vector<RequestOutput> update(const StepPlan& plan, const StepResult& result);

  bool has_unfinished_requests() const { return !requests_.empty(); }
  int32_t num_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t num_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  const SchedulerCounters& counters() const { return counters_; }
  std::vector<uint64_t> unfinished_request_ids() const;

 private:
  struct WaitingOrder {
    bool operator()(const Sequence* a, const Sequence* b) const;
    SchedulingPolicy policy;
  };

  Sequence& new_sequence(RequestState& request, int32_t index);
  KvCacheManager& kv(const Sequence& seq) const { return *kvs_[static_cast<size_t>(seq.rank)]; }
  // Gives a sequence without blocks the longest cached prefix of its tokens on its rank, choosing the rank first
  // when it has none yet (pick_data_parallel_rank); returns the number of cached tokens.
  int32_t match_prefix_on_best_rank(Sequence& seq);
  bool schedule_running(StepPlan& plan, int32_t& budget, const DraftTokens& drafts);
  // The drafts a decoding sequence may verify this step: none unless its only uncomputed token is its last (known
  // or in flight) and no verify chunk of it is in flight; at most what it may still generate after the step's own
  // token.
  int32_t max_draft_tokens(const Sequence& seq) const;
  // Applies a verify chunk's outcome: the accepted drafts' KV becomes computed, the rejected ones' blocks go back.
  void settle_drafts(Sequence& seq, int32_t num_drafts, int32_t num_tokens_returned);
  void schedule_waiting(StepPlan& plan, int32_t& budget);
  // The most tokens the sequence may compute this step: the budget, and what the pool holds for it alone.
  int32_t chunk_limit(const Sequence& seq, int32_t budget) const;
  // Offers the sequence's full blocks of computed (or scheduled) known tokens to the prefix cache.
  void cache_known_blocks(Sequence& seq);
  // True when the sequence's token in flight is certain to end it (max_tokens, the context or the pool), so that
  // nothing more is scheduled for it.
  bool ends_with_token_in_flight(const Sequence& seq) const;
  void emit_chunk(StepPlan& plan, Sequence& seq, int32_t num_new_tokens, std::span<const int32_t> draft_ids = {});
  // The running sequence at or after `first` to preempt, among those on running_[first]'s rank (only their blocks
  // make room there): lowest priority, then latest arrival.
  size_t pick_victim(size_t first) const;
  void preempt(size_t running_index);
  void fork(Sequence& first);
  // Appends one sampled token; returns its output.
  RequestOutput append_token(Sequence& seq, const SampledToken& sample);
  // Ends the sequence, frees its blocks, and completes `output`; `flush_text` emits the text still held back.
  void finish(Sequence& seq, FinishReason reason, bool flush_text, RequestOutput& output);
  // Marks one more of the request's sequences finished, completing `output` when it was the last.
  void count_finished(RequestState& request, RequestOutput& output);
  void remove_finished_requests();
  Usage usage(const RequestState& request) const;

  SchedulerConfig config_;
  std::vector<KvCacheManager*> kvs_;  // per data-parallel rank
  TextStreamFactory text_streams_;
  std::unordered_map<uint64_t, std::unique_ptr<RequestState>> requests_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> sequences_;
  std::vector<Sequence*> running_;  // admission order
  std::set<Sequence*, WaitingOrder> waiting_;
  // The queued-sequence counts of the admission groups with unfinished requests (RequestState::group_num_queued).
  std::unordered_map<uint64_t, std::weak_ptr<int64_t>> admission_groups_;
  std::vector<uint64_t> finished_since_plan_;  // told to the runner with the next plan
  std::vector<uint64_t> finished_requests_;    // removed once their outputs are out
  uint64_t next_sequence_id_ = 1;
  uint64_t next_arrival_ = 0;
  SchedulerCounters counters_;
};

}  // namespace tern
