// The validation loss (Job.evaluation) on the coordinator: StepTracker's StepEvent.validation_loss
// in the steps that evaluate, and the gauge loom_validation_loss of DaemonMetrics.
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/metrics.h"
#include "daemon/step_tracker.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "tests/float_tensor.h"

namespace loom::daemon {
namespace {

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

absl::Status AddPiece(StepTracker& tracker, const std::string& sink, int64_t piece, float value) {
  const HostTensor kept = testing::FloatTensor({value});
  return tracker.OnPiece(SinkPiece{sink, 0, piece, kept});
}

TEST(StepTrackerValidationLossTest, TheStepsThatEvaluateCarryIt) {
  StepFetches fetches;
  fetches.loss = OneRankScalar("loss");
  fetches.evaluation = OneRankScalar("evaluation/loss");
  fetches.evaluation_every_steps = 2;
  std::vector<v1::StepEvent> events;
  absl::StatusOr<std::unique_ptr<StepTracker>> tracker = StepTracker::Create(
      fetches, 1, 3, std::nullopt, [&](const v1::StepEvent& event) { events.push_back(event); });
  ASSERT_TRUE(tracker.ok()) << tracker.status();
  EXPECT_THAT((*tracker)->sinks(), ::testing::ElementsAre("loss@0", "evaluation/loss@0"));
  (*tracker)->Start();
  // Steps 1 and 3 (0-based 0 and 2) evaluate.
  ASSERT_TRUE(AddPiece(**tracker, "loss@0", 0, 4).ok());
  EXPECT_TRUE(events.empty());  // step 1 waits for its evaluated loss
  ASSERT_TRUE(AddPiece(**tracker, "evaluation/loss@0", 0, 4.5).ok());
  ASSERT_TRUE(AddPiece(**tracker, "loss@0", 1, 3).ok());
  ASSERT_TRUE(AddPiece(**tracker, "evaluation/loss@0", 2, 3.5).ok());
  ASSERT_TRUE(AddPiece(**tracker, "loss@0", 2, 2).ok());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].step(), 1);
  ASSERT_TRUE(events[0].has_validation_loss());
  EXPECT_EQ(events[0].validation_loss(), 4.5);
  EXPECT_FALSE(events[1].has_validation_loss());
  ASSERT_TRUE(events[2].has_validation_loss());
  EXPECT_EQ(events[2].validation_loss(), 3.5);
  // A piece of the evaluated loss in a step that does not evaluate fails the job.
  absl::Status stray = AddPiece(**tracker, "evaluation/loss@0", 3, 1);
  EXPECT_EQ(stray.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(stray.message(), ::testing::HasSubstr("'evaluation/loss'"));
}

// The value of the unlabelled gauge `name` in `metrics`' registry (the test fails without it).
double GaugeValue(const DaemonMetrics& metrics, const std::string& name) {
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.name != name) continue;
    EXPECT_EQ(family.type, prometheus::MetricType::Gauge);
    if (family.metric.size() == 1) return family.metric[0].gauge.value;
  }
  ADD_FAILURE() << "no gauge " << name;
  return 0;
}

TEST(DaemonMetricsValidationLossTest, TheGaugeHoldsTheLastReportedOne) {
  DaemonMetrics metrics;
  EXPECT_TRUE(std::isnan(GaugeValue(metrics, "loom_validation_loss")));
  v1::StepEvent step;
  step.set_step(1);
  step.set_loss(3);
  step.set_step_time_seconds(0.1);
  metrics.StepFinished(step);
  EXPECT_TRUE(std::isnan(GaugeValue(metrics, "loom_validation_loss")));
  step.set_step(2);
  step.set_validation_loss(2.75);
  metrics.StepFinished(step);
  EXPECT_EQ(GaugeValue(metrics, "loom_validation_loss"), 2.75);
  // A step that does not evaluate leaves it.
  step.set_step(3);
  step.set_loss(2);
  step.clear_validation_loss();
  metrics.StepFinished(step);
  EXPECT_EQ(GaugeValue(metrics, "loom_validation_loss"), 2.75);
  EXPECT_EQ(GaugeValue(metrics, "loom_training_loss"), 2);
}

}  // namespace
}  // namespace loom::daemon
