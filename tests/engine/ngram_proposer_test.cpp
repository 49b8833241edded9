// Prompt lookup against its definition: the longest suffix n-gram within bounds, its latest earlier occurrence, the
// tokens after it up to k.
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

TEST(NgramLookup, ProposesOnlyTokensThatExistAndNothingForShortSequences) {
  EXPECT_EQ(ngram_lookup(Ids{4, 4}, 1, 2, 5), (Ids{4}));
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
  EXPECT_EQ(drafts.at(7), (Ids{3, 1, 2}));
  EXPECT_THROW(NgramProposer(0, 2), Error);
  EXPECT_THROW(NgramProposer(3, 2), Error);
}

}  // namespace
}  // namespace tern
