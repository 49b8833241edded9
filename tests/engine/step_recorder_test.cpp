// The step recorder's padding (src/engine/step_recorder.h) on the CPU backend, which records no steps and takes
// chunks of one token: decode steps go to the first batch-size bucket of at most max_num_seqs that holds them,
// steps without logit rows or with longer chunks do not fit, and a backend that does not record turns recording off
// without running the forward.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/error.h"
#include "engine/step_recorder.h"

namespace tern {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kNumBlocks = 4;  // and one scratch block past them

class StepRecorderTest : public ::testing::Test {
 protected:
  StepRecorderTest()
      : backend_(make_cpu_backend(1)),
        cache_(backend_->allocate_kv_cache({{1, 8, 8}}, kNumBlocks + 1, kBlockSize)) {}

  // `num_seqs` sequences of `tokens_each` new tokens, a logit row at each one's last token where `rows`.
  static ForwardBatch decode_batch(int num_seqs, int tokens_each = 1, bool rows = true) {
    ForwardBatch batch;
    for (int s = 0; s < num_seqs; ++s) {
      batch.token_ids.insert(batch.token_ids.end(), static_cast<size_t>(tokens_each), 7);
      batch.sequences.push_back({s, tokens_each, {{s % kNumBlocks}}, 0});
      if (rows) batch.logit_rows.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
    }
    return batch;
  }

  std::unique_ptr<Backend> backend_;
  KvCache cache_;
};

TEST_F(StepRecorderTest, DecodeStepsPadToTheFirstBucketThatHoldsThem) {
  const StepRecorder recorder(*backend_, cache_, kNumBlocks, 8);  // buckets 1, 2, 4, 8
  EXPECT_EQ(recorder.max_sequences(), 8);
  EXPECT_EQ(recorder.padded_tokens(decode_batch(1)), 1);
  EXPECT_EQ(recorder.padded_tokens(decode_batch(3)), 4);
  EXPECT_EQ(recorder.padded_tokens(decode_batch(5)), 8);
  EXPECT_EQ(recorder.padded_tokens(decode_batch(8)), 8);
  EXPECT_FALSE(recorder.padded_tokens(decode_batch(9))) << "more sequences than the largest bucket";
  EXPECT_FALSE(recorder.padded_tokens(decode_batch(3, 1, false))) << "no logit rows";
  EXPECT_FALSE(recorder.padded_tokens(decode_batch(2, 2))) << "the CPU backend records chunks of one token";
}

TEST_F(StepRecorderTest, BucketsStopAtMaxNumSeqs) {
  const StepRecorder recorder(*backend_, cache_, kNumBlocks, 20);  // 1, 2, 4, 8, 16
  EXPECT_EQ(recorder.max_sequences(), 16);
  EXPECT_EQ(recorder.padded_tokens(decode_batch(9)), 16);
  EXPECT_FALSE(recorder.padded_tokens(decode_batch(17)));
}

TEST_F(StepRecorderTest, WithoutAScratchBlockEveryStepRunsEagerly) {
  const StepRecorder recorder(*backend_, cache_, -1, 8);
  EXPECT_EQ(recorder.max_sequences(), 0);
  EXPECT_FALSE(recorder.padded_tokens(decode_batch(1)));
}

TEST_F(StepRecorderTest, ABackendThatDoesNotRecordTurnsRecordingOff) {
  StepRecorder recorder(*backend_, cache_, kNumBlocks, 8);
  int runs = 0;
  const StepForward forward = [&](const StepContext&) {
    ++runs;
    return StepOutputs{};
  };
  EXPECT_FALSE(recorder.run(decode_batch(3), forward));
  EXPECT_EQ(runs, 0);
  EXPECT_EQ(recorder.num_recorded_runs(), 0);
  EXPECT_EQ(recorder.max_sequences(), 0);
  EXPECT_FALSE(recorder.padded_tokens(decode_batch(3)));
  EXPECT_EQ(recorder.record(4, false, forward), 0);
}

TEST_F(StepRecorderTest, AScratchBlockOutsideTheCacheIsRefused) {
  EXPECT_THROW(StepRecorder(*backend_, cache_, kNumBlocks + 1, 8), Error);
}

}  // namespace
}  // namespace tern
