// The staging buffers of network collectives (core/collective_staging.h), by slot: the table
// the runtime allocates by and the compiler's memory estimate counts.
#include "core/collective_staging.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/runtime/collective_test_support.h"

namespace loom::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Staging bytes of every rank of `test_case`, by rank and slot.
std::vector<std::vector<int64_t>> StagingOfEveryRank(const CollectiveCase& test_case) {
  std::vector<std::vector<int64_t>> result;
  for (int rank = 0; rank < static_cast<int>(test_case.inputs.size()); ++rank) {
    absl::StatusOr<std::vector<int64_t>> bytes =
        CollectiveStagingBytes(test_case.conf, test_case.inputs, rank, test_case.data_type);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    result.push_back(bytes.ok() ? *bytes : std::vector<int64_t>{});
  }
  return result;
}

TEST(CollectiveStagingTest, ReductionsStageEveryContributionButRankZerosAndNeverPackFlatChunks) {
  // 10 float32 on 3 ranks: chunks of 4, 3 and 3 elements. The owner of a chunk receives the
  // contributions of the ranks other than 0 and itself; rank 0's lands in the output.
  CollectiveCase all_reduce{MakeCollectiveConf(plan::ALL_REDUCE, 0, "sum"),
                            plan::FLOAT32,
                            {Shape{10}, Shape{10}, Shape{10}}};
  EXPECT_THAT(StagingOfEveryRank(all_reduce),
              ElementsAre(ElementsAre(0, 16, 16, 0, 0, 0), ElementsAre(0, 0, 12, 0, 0, 0),
                          ElementsAre(0, 12, 0, 0, 0, 0)));
  // A [2, 3, 5] all-reduce is reduced flat, like [30]: the same rule, chunks of 10.
  all_reduce.inputs = {Shape{2, 3, 5}, Shape{2, 3, 5}, Shape{2, 3, 5}};
  EXPECT_THAT(StagingOfEveryRank(all_reduce),
              ElementsAre(ElementsAre(0, 40, 40, 0, 0, 0), ElementsAre(0, 0, 40, 0, 0, 0),
                          ElementsAre(0, 40, 0, 0, 0, 0)));
}

TEST(CollectiveStagingTest, AReduceScatterAlongAnInnerAxisPacksWhatItSends) {
  // [2, 6] float32 on 2 ranks along axis 1: each owner's slice is 2 x 3 (24 bytes), not
  // contiguous in the input, so each rank packs the peer's slice; rank 0 receives rank 1's.
  CollectiveCase scatter{MakeCollectiveConf(plan::REDUCE_SCATTER, 0, "rs", plan::REDUCE_SUM, 1),
                         plan::FLOAT32,
                         {Shape{2, 6}, Shape{2, 6}}};
  EXPECT_THAT(StagingOfEveryRank(scatter),
              ElementsAre(ElementsAre(0, 24, 0, 24), ElementsAre(0, 0, 24, 0)));
  // Along the leading axis the slices are contiguous: nothing is packed.
  scatter.conf.set_axis(0);
  scatter.inputs = {Shape{4, 3}, Shape{4, 3}};
  EXPECT_THAT(StagingOfEveryRank(scatter),
              ElementsAre(ElementsAre(0, 24, 0, 0), ElementsAre(0, 0, 0, 0)));
}

TEST(CollectiveStagingTest, AnAllGatherStagesOnlyBlocksThatAreNotContiguousInItsOutput) {
  CollectiveCase gather{MakeCollectiveConf(plan::ALL_GATHER, 0, "ag", plan::REDUCE_SUM, 0),
                        plan::FLOAT32,
                        {Shape{3, 2}, Shape{2, 2}, Shape{2, 2}}};
  EXPECT_THAT(StagingOfEveryRank(gather),
              ElementsAre(ElementsAre(0, 0, 0, 0, 0, 0), ElementsAre(0, 0, 0, 0, 0, 0),
                          ElementsAre(0, 0, 0, 0, 0, 0)));
  // Along axis 1 of [2, n] bfloat16: each peer's whole input (2 x n x 2 bytes) lands in staging.
  gather.conf.set_axis(1);
  gather.data_type = plan::BFLOAT16;
  gather.inputs = {Shape{2, 3}, Shape{2, 2}, Shape{2, 2}};
  EXPECT_THAT(StagingOfEveryRank(gather),
              ElementsAre(ElementsAre(0, 8, 8, 0, 0, 0), ElementsAre(12, 0, 8, 0, 0, 0),
                          ElementsAre(12, 8, 0, 0, 0, 0)));
}

TEST(CollectiveStagingTest, AnAllToAllStagesByWhereItsBlocksAreContiguous) {
  // Split along 0 and concatenated along 0: every block moves in place.
  CollectiveCase exchange{MakeCollectiveConf(plan::ALL_TO_ALL, 0, "a2a", plan::REDUCE_SUM, 0, 0),
                          plan::FLOAT32,
                          {Shape{4, 6}, Shape{4, 6}}};
  EXPECT_THAT(StagingOfEveryRank(exchange),
              ElementsAre(ElementsAre(0, 0, 0, 0), ElementsAre(0, 0, 0, 0)));
  // Split along 0, concatenated along 1 (S(1) -> S(0)): the received 2 x 6 blocks are staged.
  exchange.conf.set_concat_axis(1);
  EXPECT_THAT(StagingOfEveryRank(exchange),
              ElementsAre(ElementsAre(0, 48, 0, 0), ElementsAre(48, 0, 0, 0)));
  // Split along 1 and concatenated along 1: the sent 4 x 3 blocks are packed, the received ones
  // staged.
  exchange.conf.set_axis(1);
  EXPECT_THAT(StagingOfEveryRank(exchange),
              ElementsAre(ElementsAre(0, 48, 0, 48), ElementsAre(48, 0, 48, 0)));
  // Uneven: [3, 5] along 1 on 3 ranks (slices of 2, 2 and 1 columns), concatenated along 0.
  exchange.conf.set_concat_axis(0);
  exchange.inputs = {Shape{3, 5}, Shape{3, 5}, Shape{3, 5}};
  EXPECT_THAT(StagingOfEveryRank(exchange),
              ElementsAre(ElementsAre(0, 0, 0, 0, 24, 12), ElementsAre(0, 0, 0, 24, 0, 12),
                          ElementsAre(0, 0, 0, 24, 24, 0)));
}

TEST(CollectiveStagingTest, ShapesThatDoNotFitTogetherAreAnError) {
  const plan::CollectiveConf conf = MakeCollectiveConf(plan::ALL_REDUCE, 0, "sum");
  const std::vector<Shape> inputs = {Shape{4}, Shape{5}};
  absl::StatusOr<std::vector<int64_t>> bytes =
      CollectiveStagingBytes(conf, inputs, 0, plan::FLOAT32);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bytes.status().message(), HasSubstr("rank"));
}

}  // namespace
}  // namespace loom::testing
