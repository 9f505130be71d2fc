// StepCollector with an evaluation (Job.evaluation): StepFetchesOf picks the plan's evaluation
// fetch and its steps; a step that evaluates finishes only with every rank's pieces of the
// evaluated loss and reports their mean as its validation loss; the other steps never wait for it,
// and a piece of the evaluated loss in such a step is an error.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/step_collector.h"
#include "tests/float_tensor.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kEvaluation[] = "evaluation/loss";

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

// A whole-job plan of 2 ranks and 2 micro-batches per step that fetches the loss, an accuracy and
// the evaluated loss, evaluating every 3 steps from step 4 (a resumed run): its collector's steps
// 2, 5, 8, ... (global 6, 9, 12, ...; the step lines' 7, 10, 13, ...) evaluate.
plan::Plan EvaluatingPlan() {
  plan::Plan plan;
  plan.set_num_micro_batches(2);
  plan.set_evaluation_every_steps(3);
  plan.set_first_step(4);
  *plan.add_fetches() = PartialScalar("loss");
  plan::Fetch* evaluation = plan.add_fetches();
  *evaluation = PartialScalar(kEvaluation);
  evaluation->set_evaluation(true);
  *plan.add_fetches() = PartialScalar("accuracy");
  return plan;
}

class StepCollectorEvaluationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<StepFetches> fetches = StepFetchesOf(EvaluatingPlan(), "loss");
    ASSERT_TRUE(fetches.ok()) << fetches.status();
    absl::StatusOr<StepCollector> created = StepCollector::Create(*fetches, 2);
    ASSERT_TRUE(created.ok()) << created.status();
    collector_.emplace(std::move(*created));
  }

  // Rank `rank`'s piece `piece` of `tensor`: the result of Add.
  absl::StatusOr<std::vector<FinishedStep>> TryAdd(const std::string& tensor, int rank,
                                                   int64_t piece, float value) {
    const std::string sink = tensor + "@" + std::to_string(rank);
    const HostTensor kept = testing::FloatTensor({value});
    return collector_->Add(SinkPiece{sink, 0, piece, kept});
  }
  // The same, expecting success: the steps it finished.
  std::vector<FinishedStep> Add(const std::string& tensor, int rank, int64_t piece, float value) {
    absl::StatusOr<std::vector<FinishedStep>> finished = TryAdd(tensor, rank, piece, value);
    EXPECT_TRUE(finished.ok()) << finished.status();
    return finished.ok() ? *finished : std::vector<FinishedStep>();
  }
  // Both ranks' pieces of both micro-batches of collector step `step`, `value` / 2 each (so each
  // assembled piece is `value`), for each of `tensors`: the steps finished.
  std::vector<FinishedStep> AddStep(int64_t step, const std::vector<std::string>& tensors,
                                    float value) {
    std::vector<FinishedStep> finished;
    for (const std::string& tensor : tensors) {
      for (int64_t piece = 2 * step; piece < 2 * step + 2; ++piece) {
        for (int rank = 0; rank < 2; ++rank) {
          std::vector<FinishedStep> more = Add(tensor, rank, piece, value / 2);
          finished.insert(finished.end(), more.begin(), more.end());
        }
      }
    }
    return finished;
  }

  std::optional<StepCollector> collector_;
};

TEST_F(StepCollectorEvaluationTest, StepFetchesOfPicksTheEvaluationFetchAndItsSteps) {
  absl::StatusOr<StepFetches> fetches = StepFetchesOf(EvaluatingPlan(), "loss");
  ASSERT_TRUE(fetches.ok()) << fetches.status();
  EXPECT_EQ(fetches->loss.tensor(), "loss");
  ASSERT_EQ(fetches->scalars.size(), 1u);  // not the evaluated loss
  EXPECT_EQ(fetches->scalars[0].tensor(), "accuracy");
  ASSERT_TRUE(fetches->evaluation.has_value());
  EXPECT_EQ(fetches->evaluation->tensor(), kEvaluation);
  EXPECT_EQ(fetches->evaluation_every_steps, 3);
  EXPECT_EQ(fetches->first_step, 4);
  EXPECT_THAT(collector_->sinks(), ElementsAre("loss@0", "loss@1", "accuracy@0", "accuracy@1",
                                               "evaluation/loss@0", "evaluation/loss@1"));
}

TEST_F(StepCollectorEvaluationTest, AStepThatDoesNotEvaluateNeverWaitsForIt) {
  EXPECT_THAT(AddStep(0, {"loss"}, 3), IsEmpty());  // the accuracy is missing
  std::vector<FinishedStep> finished = AddStep(0, {"accuracy"}, 0.5);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].index, 0);  // global step 4
  EXPECT_DOUBLE_EQ(finished[0].loss, 3);
  EXPECT_FALSE(finished[0].validation_loss.has_value());
  ASSERT_EQ(finished[0].scalars.size(), 1u);
  EXPECT_EQ(finished[0].scalars[0].tensor, "accuracy");
  finished = AddStep(1, {"loss", "accuracy"}, 2);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].index, 1);  // global step 5
  EXPECT_FALSE(finished[0].validation_loss.has_value());
}

TEST_F(StepCollectorEvaluationTest, AStepThatEvaluatesWaitsForEveryRankAndReadsTheMean) {
  AddStep(0, {"loss", "accuracy"}, 1);
  AddStep(1, {"loss", "accuracy"}, 1);
  // Step 2 (global 6) evaluates: its loss and accuracy are not enough.
  EXPECT_THAT(AddStep(2, {"loss", "accuracy"}, 4), IsEmpty());
  // Micro-batch 0: the ranks' partial sums 1 + 2; micro-batch 1: 2 + 3.
  EXPECT_THAT(Add(kEvaluation, 0, 4, 1), IsEmpty());
  EXPECT_THAT(Add(kEvaluation, 1, 4, 2), IsEmpty());
  EXPECT_THAT(Add(kEvaluation, 1, 5, 3), IsEmpty());  // rank 0's part is missing
  std::vector<FinishedStep> finished = Add(kEvaluation, 0, 5, 2);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].index, 2);
  EXPECT_DOUBLE_EQ(finished[0].loss, 4);
  ASSERT_TRUE(finished[0].validation_loss.has_value());
  EXPECT_DOUBLE_EQ(*finished[0].validation_loss, 4);  // (3 + 5) / 2
  ASSERT_EQ(finished[0].scalars.size(), 1u);          // the evaluated loss is no scalar
  EXPECT_EQ(collector_->steps_done(), 3);
}

TEST_F(StepCollectorEvaluationTest, StepsFinishInOrderAndEveryThirdEvaluates) {
  // Steps 3 and 4 are complete before step 2's evaluation comes: they wait for it.
  AddStep(0, {"loss", "accuracy"}, 1);
  AddStep(1, {"loss", "accuracy"}, 1);
  EXPECT_THAT(AddStep(2, {"loss", "accuracy"}, 1), IsEmpty());
  EXPECT_THAT(AddStep(3, {"loss", "accuracy"}, 1), IsEmpty());
  EXPECT_THAT(AddStep(4, {"loss", "accuracy"}, 1), IsEmpty());
  std::vector<FinishedStep> finished = AddStep(2, {kEvaluation}, 2.5);
  ASSERT_EQ(finished.size(), 3u);
  EXPECT_EQ(finished[0].index, 2);
  EXPECT_EQ(finished[0].validation_loss, 2.5);
  EXPECT_EQ(finished[1].index, 3);
  EXPECT_EQ(finished[1].validation_loss, std::nullopt);
  EXPECT_EQ(finished[2].index, 4);
  EXPECT_EQ(finished[2].validation_loss, std::nullopt);
  // Step 5 (global 9) evaluates next: its evaluation may come first.
  EXPECT_THAT(AddStep(5, {kEvaluation}, 1.75), IsEmpty());
  finished = AddStep(5, {"loss", "accuracy"}, 1);
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_EQ(finished[0].index, 5);
  EXPECT_EQ(finished[0].validation_loss, 1.75);
}

TEST_F(StepCollectorEvaluationTest, APieceOfTheEvaluatedLossInAStepThatDoesNotEvaluateIsAnError) {
  // Piece 2 is step 1's (global 5, the step lines' 6).
  absl::StatusOr<std::vector<FinishedStep>> stray = TryAdd(kEvaluation, 1, 2, 1);
  EXPECT_EQ(stray.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(stray.status().message(),
              AllOf(HasSubstr("'evaluation/loss@1'"), HasSubstr("'evaluation/loss'"),
                    HasSubstr("piece 2, of step 6"), HasSubstr("every 3 steps")));
}

TEST(StepFetchesOfTest, InconsistentEvaluationsAreInternalErrors) {
  plan::Plan plan = EvaluatingPlan();
  plan.set_evaluation_every_steps(0);
  absl::StatusOr<StepFetches> fetches = StepFetchesOf(plan, "loss");
  EXPECT_EQ(fetches.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(fetches.status().message(), HasSubstr("'evaluation/loss'"));

  plan = EvaluatingPlan();
  plan.mutable_fetches(1)->set_evaluation(false);
  fetches = StepFetchesOf(plan, "loss");
  EXPECT_EQ(fetches.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(fetches.status().message(), HasSubstr("evaluates every 3 steps"));

  plan = EvaluatingPlan();
  plan.mutable_fetches(2)->set_evaluation(true);
  fetches = StepFetchesOf(plan, "loss");
  EXPECT_EQ(fetches.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(fetches.status().message(),
              AllOf(HasSubstr("'evaluation/loss'"), HasSubstr("'accuracy'")));
}

TEST(StepFetchesOfTest, APlanWithoutEvaluationHasNone) {
  plan::Plan plan = EvaluatingPlan();
  plan.clear_evaluation_every_steps();
  plan.mutable_fetches()->DeleteSubrange(1, 1);
  absl::StatusOr<StepFetches> fetches = StepFetchesOf(plan, "loss");
  ASSERT_TRUE(fetches.ok()) << fetches.status();
  EXPECT_FALSE(fetches->evaluation.has_value());
  EXPECT_EQ(fetches->evaluation_every_steps, 0);
}

TEST(StepCollectorCreateTest, TheEvaluatedLossMustBeAFloat32Scalar) {
  absl::StatusOr<StepFetches> fetches = StepFetchesOf(EvaluatingPlan(), "loss");
  ASSERT_TRUE(fetches.ok()) << fetches.status();
  fetches->evaluation->mutable_logical()->set_shape(0, 4);
  absl::StatusOr<StepCollector> collector = StepCollector::Create(*fetches, 2);
  EXPECT_EQ(collector.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(collector.status().message(), HasSubstr("the evaluated loss 'evaluation/loss'"));
}

TEST(TokensPerStepTest, TheHeldOutInputsOfTheEvaluationDoNotCount) {
  job::Job job;
  job::Input* tokens = job.add_inputs();
  tokens->set_name("x");
  tokens->add_shape(4);
  tokens->add_shape(16);
  tokens->mutable_token_file()->set_path("train.bin");
  job::Input* held_out = job.add_inputs();
  *held_out = *tokens;
  held_out->set_name("evaluation/x");
  held_out->mutable_token_file()->set_path("validation.bin");
  held_out->set_evaluation(true);
  EXPECT_EQ(TokensPerStep(job), 4 * 16);
}

}  // namespace
}  // namespace loom
