// The validation loss (Job.evaluation) in loomctl's step lines: FormatStepLineText's `val_loss`
// and FormatStepLineJson's "validation_loss" on the steps that have one (the other lines as they
// were), StepReporter's lines of a run of segments counting the steps that evaluate over the whole
// run, and JobEventPrinter's lines of a daemon's step events.
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/float_tensor.h"
#include "tools/loomctl/job_watch.h"
#include "tools/loomctl/step_reporter.h"

namespace loom::loomctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kEvaluation[] = "evaluation/loss";

TEST(ValidationLossLineTest, FollowsTheLossInTextAndJson) {
  StepLine line;
  line.step = 7;
  line.last_step = 10;
  line.loss = 2.5;
  line.validation_loss = 2.34567;
  line.scalars = {{"accuracy", 0.75}};
  line.step_time_ms = 10;
  line.tokens_per_second = 100;
  EXPECT_EQ(FormatStepLineText(line),
            "step 7/10  loss 2.50000  val_loss 2.34567  accuracy 0.75  time 10.0 ms  tokens/s 100");
  EXPECT_EQ(FormatStepLineJson(line),
            "{\"step\":7,\"loss\":2.5,\"validation_loss\":2.34567,\"scalars\":{\"accuracy\":0.75},"
            "\"step_time_ms\":10.0,\"tokens_per_second\":100.0}");
  line.validation_loss = NAN;
  EXPECT_THAT(FormatStepLineText(line), HasSubstr("  val_loss nan  "));
  EXPECT_THAT(FormatStepLineJson(line), HasSubstr(",\"validation_loss\":null,"));
}

TEST(ValidationLossLineTest, AStepWithoutOneKeepsItsLine) {
  StepLine line;
  line.step = 3;
  line.last_step = 20;
  line.loss = 5.4321;
  line.step_time_ms = 85.2;
  line.tokens_per_second = 12020;
  EXPECT_EQ(FormatStepLineText(line), "step 3/20  loss 5.43210  time 85.2 ms  tokens/s 12020");
  EXPECT_EQ(FormatStepLineJson(line),
            "{\"step\":3,\"loss\":5.4321,\"scalars\":{},\"step_time_ms\":85.2,"
            "\"tokens_per_second\":12020.0}");
}

// A float32 [1] fetch of one rank, from the sink "<tensor>@0".
plan::Fetch OneRankScalar(const std::string& tensor) {
  plan::Fetch fetch;
  fetch.set_tensor(tensor);
  fetch.mutable_logical()->add_shape(1);
  fetch.mutable_logical()->set_data_type(plan::FLOAT32);
  fetch.add_hierarchy(1);
  fetch.add_sbp("B");
  fetch.add_sinks(tensor + "@0");
  return fetch;
}

// The step fetches of a segment's plan that starts after `first_step` steps and evaluates every 3
// steps (one micro-batch per step).
StepFetches EvaluatingFetches(int64_t first_step) {
  StepFetches fetches;
  fetches.loss = OneRankScalar("loss");
  fetches.evaluation = OneRankScalar(kEvaluation);
  fetches.evaluation_every_steps = 3;
  fetches.first_step = first_step;
  return fetches;
}

// Runs `steps` steps of a segment on `reporter` (piece numbers from 0): losses 1, 2, ...; the
// evaluated loss 0.5 in the steps that evaluate, whose pieces arrive before the loss's.
void RunSegment(StepReporter& reporter, int64_t first_step, int64_t steps) {
  ASSERT_TRUE(reporter.BeginSegment(EvaluatingFetches(first_step), 1, first_step).ok());
  for (int64_t piece = 0; piece < steps; ++piece) {
    if ((first_step + piece) % 3 == 0) {
      const HostTensor evaluated = testing::FloatTensor({0.5f});
      ASSERT_TRUE(reporter.OnPiece(SinkPiece{"evaluation/loss@0", 0, piece, evaluated}).ok());
    }
    const HostTensor loss = testing::FloatTensor({static_cast<float>(piece + 1)});
    absl::Status status = reporter.OnPiece(SinkPiece{"loss@0", 0, piece, loss});
    ASSERT_TRUE(status.ok()) << status;
  }
  absl::Status ended = reporter.EndSegment(steps);
  ASSERT_TRUE(ended.ok()) << ended;
}

TEST(ValidationLossReporterTest, SegmentsCountTheStepsThatEvaluateOverTheWholeRun) {
  std::ostringstream out;
  StepReporter::Options options;
  options.last_step = 10;
  options.out = &out;
  StepReporter reporter(options);
  // A run resumed after 4 steps, saved every 3: steps 5-7 and 8-10; steps 7 and 10 evaluate
  // (global 0-based 6 and 9).
  RunSegment(reporter, 4, 3);
  RunSegment(reporter, 7, 3);
  std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  EXPECT_THAT(lines, ElementsAre(StartsWith("step 5/10  loss 1.00000  time "),
                                 StartsWith("step 6/10  loss 2.00000  time "),
                                 StartsWith("step 7/10  loss 3.00000  val_loss 0.50000  time "),
                                 StartsWith("step 8/10  loss 1.00000  time "),
                                 StartsWith("step 9/10  loss 2.00000  time "),
                                 StartsWith("step 10/10  loss 3.00000  val_loss 0.50000  time ")));
}

TEST(ValidationLossReporterTest, JsonLinesCarryIt) {
  std::ostringstream out;
  StepReporter::Options options;
  options.last_step = 3;
  options.json = true;
  options.out = &out;
  StepReporter reporter(options);
  RunSegment(reporter, 0, 3);
  std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(lines[0], StartsWith("{\"step\":1,\"loss\":1.0,\"validation_loss\":0.5,\"scalars\""));
  EXPECT_THAT(lines[1], StartsWith("{\"step\":2,\"loss\":2.0,\"scalars\""));
  EXPECT_THAT(lines[2], Not(HasSubstr("validation_loss")));
}

TEST(ValidationLossReporterTest, APlanThatCountsFromAnotherStepIsAnInternalError) {
  std::ostringstream out;
  StepReporter::Options options;
  options.last_step = 10;
  options.out = &out;
  StepReporter reporter(options);
  absl::Status status = reporter.BeginSegment(EvaluatingFetches(4), 1, 5);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status.message(), HasSubstr("the plan starts at step 5"));
  EXPECT_THAT(status.message(), HasSubstr("segment at step 6"));
  // Without an evaluation the plan's first step does not matter.
  StepFetches plain = EvaluatingFetches(4);
  plain.evaluation.reset();
  plain.evaluation_every_steps = 0;
  EXPECT_TRUE(reporter.BeginSegment(plain, 1, 5).ok());
}

v1::JobEvent StepEvent(int64_t step, double loss) {
  v1::JobEvent event;
  event.set_job_id("job-7");
  event.set_sequence(step + 1);
  event.mutable_step()->set_step(step);
  event.mutable_step()->set_num_steps(2);
  event.mutable_step()->set_loss(loss);
  event.mutable_step()->set_step_time_seconds(0.25);
  return event;
}

TEST(ValidationLossWatchTest, TextLinesShowItOnTheStepsThatHaveOne) {
  std::ostringstream out;
  JobEventPrinter printer(OutputFormat::kText, &out, nullptr);
  printer.OnEvent(StepEvent(1, 2.5));
  v1::JobEvent evaluated = StepEvent(2, 1.25);
  evaluated.mutable_step()->set_validation_loss(2.25);
  printer.OnEvent(evaluated);
  printer.Finish();
  EXPECT_EQ(out.str(),
            "step 1/2  loss 2.50000  time 250.0 ms\n"
            "step 2/2  loss 1.25000  val_loss 2.25000  time 250.0 ms\n");
}

TEST(ValidationLossWatchTest, JsonLinesCarryItWhenSet) {
  std::ostringstream out;
  JobEventPrinter printer(OutputFormat::kJson, &out, nullptr);
  printer.OnEvent(StepEvent(1, 2.5));
  v1::JobEvent evaluated = StepEvent(2, 1.25);
  evaluated.mutable_step()->set_validation_loss(2.25);
  printer.OnEvent(evaluated);
  std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], Not(HasSubstr("validation_loss")));
  EXPECT_THAT(lines[1], HasSubstr("\"validation_loss\":2.25"));
}

}  // namespace
}  // namespace loom::loomctl
