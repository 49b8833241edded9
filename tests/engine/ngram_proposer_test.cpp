// Prompt lookup against its definition: the longest suffix n-gram within bounds, its latest earlier occurrence, k
// tokens after it (repeating past the end).
#include "engine/ngram_proposer.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace tern {
namespace {

using Ids = std::vector<int32_t>;

TEST(NgramLookup, TheLongestSuffixWithinTheBoundsFindsItsLatestEarlierOccurrence) {
  //                 0  1  2  3  4  5  6  7  8  9 10
  const Ids tokens = {5, 6, 7, 8, 1, 6, 7, 9, 2, 6, 7};
  // The bigram 6 7 occurs at 1 and 5; the latest is followed by 9 2 6.
  EXPECT_EQ(ngram_lookup(tokens, 1, 3, 3), (Ids{9, 2, 6}));
  EXPECT_EQ(ngram_lookup(tokens, 1, 3, 1), (Ids{9}));
  // A trigram 2 6 7 never occurred before: with min 3 nothing is proposed.
  EXPECT_EQ(ngram_lookup(tokens, 3, 3, 3), Ids{});
}

TEST(NgramLookup, ALongerMatchWinsOverALaterShorterOne) {
  //                 0  1  2  3  4  5  6  7  8
  const Ids tokens = {1, 2, 3, 4, 9, 2, 3, 1, 2, 3};
  // 1 2 3 matches at 0 (followed by 4); 2 3 alone also matches later at 5 (followed by 1).
  EXPECT_EQ(ngram_lookup(tokens, 1, 3, 2), (Ids{4, 9}));
  EXPECT_EQ(ngram_lookup(tokens, 1, 2, 2), (Ids{1, 2}));
}

// A continuation that reaches the end of the sequence goes on as the text repeats itself: the tokens after the
// match, over and over.
TEST(NgramLookup, PastTheEndTheContinuationRepeatsAndShortSequencesGetNothing) {
  EXPECT_EQ(ngram_lookup(Ids{4, 4}, 1, 2, 5), (Ids{4, 4, 4, 4, 4}));
  // 7 8 at the start is followed by 5 7 8, which then repeat.
  EXPECT_EQ(ngram_lookup(Ids{7, 8, 5, 7, 8}, 2, 2, 7), (Ids{5, 7, 8, 5, 7, 8, 5}));
  EXPECT_EQ(ngram_lookup(Ids{4}, 1, 2, 5), Ids{});
  EXPECT_EQ(ngram_lookup(Ids{}, 1, 2, 5), Ids{});
}

TEST(NgramProposer, DraftsOnlyForSequencesWithAMatchAndRefusesBadBounds) {
  NgramProposer proposer(2, 3);
  const Ids repeating = {1, 2, 3, 1, 2};
  const Ids fresh = {1, 2, 3, 4, 5};
  const DraftRequest requests[] = {{7, repeating, 2, 4}, {8, fresh, 2, 4}};
  const DraftTokens drafts = proposer.propose(requests);
  ASSERT_EQ(drafts.size(), 1u);
  EXPECT_EQ(drafts.at(7), (Ids{3, 1, 2, 3}));
  EXPECT_THROW(NgramProposer(0, 2), Error);
  EXPECT_THROW(NgramProposer(3, 2), Error);
}

// Overlap scheduling: the token the step in flight samples is not among the tokens yet. The lookup's first token
// stands for it, and the drafts are the k after it; without a match, nothing.
TEST(NgramProposer, PastATokenInFlightDraftsAfterTheLookupsFirstToken) {
  NgramProposer proposer(2, 3);
  EXPECT_TRUE(proposer.drafts_past_token_in_flight());
  const Ids repeating = {1, 2, 3, 4, 1, 2};
  const Ids looping = {3, 3, 3};
  const Ids fresh = {1, 2, 3, 4, 5};
  const DraftRequest requests[] = {{7, repeating, 2, 2, true}, {8, looping, 2, 4, true}, {9, repeating, 2, 2},
                                   {10, fresh, 2, 3, true}};
  const DraftTokens drafts = proposer.propose(requests);
  ASSERT_EQ(drafts.size(), 3u);
  EXPECT_EQ(drafts.at(7), (Ids{4, 1}));  // 1 2 -> 3 (in flight), then 4 1
  EXPECT_EQ(drafts.at(8), (Ids{3, 3, 3, 3}));  // 3 3 -> 3 (in flight), then 3 3 3 3
  EXPECT_EQ(drafts.at(9), (Ids{3, 4}));
}

}  // namespace
}  // namespace tern
