// StepCollector: steps finish when every rank's sink holds every micro-batch piece of the loss and
// of the scalar fetches; ObservePieces shares the assembled pieces of a step fetch.
#include "node/step_collector.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/float_tensor.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// A float32 [1] fetch over two ranks, partial sums ("P"), from sinks "<tensor>@0" and "@1".
plan::Fetch PartialScalar(const std::string& tensor) {
  plan::Fetch fetch;
  fetch.set_tensor(tensor);
  fetch.mutable_logical()->add_shape(1);
  fetch.mutable_logical()->set_data_type(plan::FLOAT32);
  fetch.add_hierarchy(2);
  fetch.add_sbp("P");
  fetch.add_sinks(tensor + "@0");
  fetch.add_sinks(tensor + "@1");
  return fetch;
}

class StepCollectorTest : public ::testing::Test {
 protected:
  // Adds rank `rank`'s piece `piece` of `tensor`; the steps it finished.
  std::vector<FinishedStep> Add(StepCollector& collector, const std::string& tensor, int rank,
                                int64_t piece, float value) {
    const std::string sink = tensor + "@" + std::to_string(rank);
    const HostTensor kept = testing::FloatTensor({value});
    absl::StatusOr<std::vector<FinishedStep>> finished =
        collector.Add(SinkPiece{sink, 0, piece, kept});
    EXPECT_TRUE(finished.ok()) << finished.status();
    return finished.ok() ? *finished : std::vector<FinishedStep>();
  }
};

TEST_F(StepCollectorTest, AStepFinishesWithItsLastPieceAndReadsTheMeanOfItsMicroBatches) {
  absl::StatusOr<StepCollector> collector =
      StepCollector::Create({PartialScalar("loss"), {PartialScalar("dropped")}}, 2);
  ASSERT_TRUE(collector.ok()) << collector.status();
  // Micro-batch 0 of step 0: ranks' partial sums 1 + 2 (loss) and 10 + 20 (dropped).
  EXPECT_THAT(Add(*collector, "loss", 0, 0, 1), IsEmpty());
  EXPECT_THAT(Add(*collector, "loss", 1, 0, 2), IsEmpty());
  EXPECT_THAT(Add(*collector, "dropped", 0, 0, 10), IsEmpty());
  EXPECT_THAT(Add(*collector, "dropped", 1, 0, 20), IsEmpty());
  // Micro-batch 1: 5 (loss), 50 (dropped).
  EXPECT_THAT(Add(*collector, "loss", 0, 1, 4), IsEmpty());
  EXPECT_THAT(Add(*collector, "loss", 1, 1, 1), IsEmpty());
  EXPECT_THAT(Add(*collector, "dropped", 1, 1, 25), IsEmpty());
  std::vector<FinishedStep> finished = Add(*collector, "dropped", 0, 1, 25);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].index, 0);
  EXPECT_DOUBLE_EQ(finished[0].loss, 4);  // (3 + 5) / 2
  ASSERT_EQ(finished[0].scalars.size(), 1u);
  EXPECT_EQ(finished[0].scalars[0].tensor, "dropped");
  EXPECT_DOUBLE_EQ(finished[0].scalars[0].value, 40);  // (30 + 50) / 2
  EXPECT_EQ(collector->steps_done(), 1);
  EXPECT_THAT(collector->sinks(), ElementsAre("loss@0", "loss@1", "dropped@0", "dropped@1"));
}

TEST_F(StepCollectorTest, ASummedFetchReadsTheSumOfItsMicroBatches) {
  plan::Fetch dropped = PartialScalar("dropped");
  dropped.set_summed_over_step(true);
  absl::StatusOr<StepCollector> collector =
      StepCollector::Create({PartialScalar("loss"), {dropped, PartialScalar("accuracy")}}, 2);
  ASSERT_TRUE(collector.ok()) << collector.status();
  std::vector<FinishedStep> finished;
  for (int64_t piece = 0; piece < 2; ++piece) {
    for (int rank = 0; rank < 2; ++rank) {
      Add(*collector, "loss", rank, piece, 1);
      Add(*collector, "accuracy", rank, piece, piece == 0 ? 0.25f : 0.5f);
      finished = Add(*collector, "dropped", rank, piece, piece == 0 ? 3 : 4);
    }
  }
  ASSERT_EQ(finished.size(), 1u);
  ASSERT_EQ(finished[0].scalars.size(), 2u);
  EXPECT_EQ(finished[0].scalars[0].tensor, "dropped");
  EXPECT_DOUBLE_EQ(finished[0].scalars[0].value, 14);  // (3 + 3) + (4 + 4)
  EXPECT_EQ(finished[0].scalars[1].tensor, "accuracy");
  EXPECT_DOUBLE_EQ(finished[0].scalars[1].value, 0.75);  // ((0.25 + 0.25) + (0.5 + 0.5)) / 2
  EXPECT_DOUBLE_EQ(finished[0].loss, 2);
}

TEST_F(StepCollectorTest, AnObserverGetsEveryAssembledPieceOfItsFetch) {
  absl::StatusOr<StepCollector> collector =
      StepCollector::Create({PartialScalar("loss"), {PartialScalar("dropped")}}, 1);
  ASSERT_TRUE(collector.ok()) << collector.status();
  std::vector<float> observed;
  EXPECT_TRUE(collector->ObservePieces(
      "dropped", [&](const HostTensor& tensor) { observed.push_back(tensor.Values<float>()[0]); }));
  EXPECT_FALSE(collector->ObservePieces("tokens_per_expert", [](const HostTensor&) {}));
  Add(*collector, "dropped", 0, 0, 1);
  EXPECT_THAT(observed, IsEmpty());  // rank 1's part is missing
  Add(*collector, "dropped", 1, 0, 2);
  Add(*collector, "dropped", 1, 1, 3);
  Add(*collector, "dropped", 0, 1, 4);
  EXPECT_THAT(observed, ElementsAre(3, 7));
  // The loss's pieces reach no observer.
  Add(*collector, "loss", 0, 0, 1);
  Add(*collector, "loss", 1, 0, 1);
  EXPECT_THAT(observed, ElementsAre(3, 7));
}

}  // namespace
}  // namespace loom
