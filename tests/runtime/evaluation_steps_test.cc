// Tasks of a job's evaluation (Task.evaluation_every_steps) work only in the steps that evaluate:
// in the others they act without working, so that the flow of credits is every task's, and sinks
// record nothing.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::ElementsAre;

// source -> plus (evaluation, every 3 steps of 2 pieces, first step 4) -> sink (evaluation).
plan::Plan EvaluationChain() {
  PlanBuilder builder("evaluation_chain");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {4}).AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(16);
  builder.AddTask("plus", plan::COMPUTE, 0, {"x"}, {"y"}, "test_sum_plus_one");
  builder.AddTask("sink", plan::SINK, 0, {"y"}, {});
  plan::Plan plan = builder.plan();
  for (int index : {1, 2}) {
    plan::Task* task = plan.mutable_tasks(index);
    task->set_pieces_per_step(2);
    task->set_evaluation_every_steps(3);
    task->set_first_step(4);
  }
  return plan;
}

TEST(EvaluationStepsTest, OnlyTheEvaluationStepsWorkAndTheSinkRecordsOnlyThem) {
  JobOptions options;
  options.record_events = true;
  auto job = MakeJob(EvaluationChain(), options);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  // Pieces 0..15 are steps 4..11 (two pieces each): steps 6 and 9 evaluate, pieces 4, 5, 10, 11.
  EXPECT_THAT(SinkValues(**job, "sink"), ElementsAre(5.0f, 6.0f, 11.0f, 12.0f));
  // Every task acted on every piece: the idle acts keep the credits flowing.
  EXPECT_EQ(EventsOf(**job, "plus").size(), 16u);
}

TEST(EvaluationStepsTest, PlansWithNegativeEvaluationFieldsOrEvaluationVariablesAreRefused) {
  plan::Plan plan = EvaluationChain();
  plan.mutable_tasks(1)->set_evaluation_every_steps(-1);
  auto job = MakeJob(plan);
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(job.status().message(), ::testing::HasSubstr("evaluation_every_steps"));
}

}  // namespace
}  // namespace loom::testing
