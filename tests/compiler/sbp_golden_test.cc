// The SBP decisions the compiler must make on the classic layouts, read from the plan.
#include <cstdint>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/test_jobs.h"

namespace loom::compiler::testing {
namespace {

const char* kFourDevices = R"pb(devices: [ "cpu:0", "cpu:1", "cpu:2", "cpu:3" ])pb";

TEST(SbpGoldenTest, DataParallelMlpCommunicatesNothingInForward) {
  job::Job job = ParseJob(DataParallelMlp(kFourDevices));
  auto result = CompileOn(job, 4);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(SbpOf(*result, "h"), "S(0)");
  EXPECT_EQ(SbpOf(*result, "a"), "S(0)");
  EXPECT_EQ(SbpOf(*result, "y"), "S(0)");
  EXPECT_TRUE(TasksOfKind(result->plan, plan::COLLECTIVE).empty());
  EXPECT_TRUE(TasksOfKind(result->plan, plan::COPY).empty());
  // One compute task per op per device.
  EXPECT_EQ(TasksOfKind(result->plan, plan::COMPUTE).size(), 3u * 4u);
}

TEST(SbpGoldenTest, MegatronMlpHasExactlyOneAllReduceAfterTheSecondMatmul) {
  job::Job job = ParseJob(MegatronMlp(kFourDevices));
  auto result = CompileOn(job, 4);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(SbpOf(*result, "h"), "S(1)");
  EXPECT_EQ(SbpOf(*result, "hb"), "S(1)");
  EXPECT_EQ(SbpOf(*result, "g"), "S(1)");
  EXPECT_EQ(SbpOf(*result, "y"), "P");
  EXPECT_EQ(SbpOf(*result, "z"), "B");
  std::vector<const plan::Task*> collectives = TasksOfKind(result->plan, plan::COLLECTIVE);
  ASSERT_EQ(collectives.size(), 4u) << "one all-reduce: one task per rank";
  for (const plan::Task* task : collectives) {
    EXPECT_EQ(task->collective().kind(), plan::ALL_REDUCE);
    ASSERT_EQ(task->inputs_size(), 1);
    EXPECT_EQ(task->inputs(0).substr(0, 2), "y@") << "reduces the second matmul's output";
  }
  EXPECT_TRUE(TasksOfKind(result->plan, plan::COPY).empty());
  // No other boxing either: every compute task is an op of the job.
  EXPECT_EQ(TasksOfKind(result->plan, plan::COMPUTE).size(), 5u * 4u);
}

TEST(SbpGoldenTest, TwoDimensionalHierarchySplitsRowsAndColumns) {
  job::Job job = ParseJob(TwoDimensionalMatmul());
  auto result = CompileOn(job, 4);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(SbpOf(*result, "y"), "(S(0), S(1))");
  EXPECT_EQ(SbpOf(*result, "r"), "(S(0), S(1))");
  EXPECT_TRUE(TasksOfKind(result->plan, plan::COLLECTIVE).empty());
  // Rank 3 (coordinates 1, 1) holds rows 4..7 and columns 6..11 of y.
  for (const plan::RegisterDesc& reg : result->plan.registers()) {
    if (reg.name() == "y@3") {
      EXPECT_THAT(reg.tensor().shape(), ::testing::ElementsAre(4, 6));
    }
  }
}

TEST(SbpGoldenTest, TwoStagesCommunicateOnlyByCopiesAtTheBoundary) {
  job::Job job = ParseJob(TwoStageMlp());
  auto result = CompileOn(job, 4);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(TasksOfKind(result->plan, plan::COLLECTIVE).empty());
  std::vector<const plan::Task*> copies = TasksOfKind(result->plan, plan::COPY);
  ASSERT_EQ(copies.size(), 2u) << "one-to-one: one copy per rank of the second stage";
  for (const plan::Task* copy : copies) {
    EXPECT_EQ(copy->inputs(0).substr(0, 2), "a@");
    EXPECT_GE(copy->stream().device().index(), 2);
    // CPU devices of one node: a memcpy, on the receiver's compute stream before its other work.
    EXPECT_EQ(copy->stream().kind(), plan::STREAM_COMPUTE);
    EXPECT_EQ(copy->priority(), std::numeric_limits<int32_t>::max());
  }
}

TEST(SbpGoldenTest, ExplainNamesSignaturesAndBoxings) {
  job::Job job = ParseJob(MegatronMlp(kFourDevices));
  auto result = CompileOn(job, 4);
  ASSERT_TRUE(result.ok()) << result.status();
  std::string explanation = Explain(*result);
  EXPECT_THAT(explanation, ::testing::HasSubstr("op y (matmul)"));
  EXPECT_THAT(explanation, ::testing::HasSubstr("(S(1), S(0)) -> (P)"));
  EXPECT_THAT(explanation, ::testing::HasSubstr("all-reduce(sum) P -> B"));
}

TEST(SbpGoldenTest, PlansSplitPerNode) {
  job::Job job = ParseJob(
      DataParallelMlp(R"pb(devices: [ "cpu:0", "cpu:1", "node1/cpu:0", "node1/cpu:1" ])pb"));
  auto result = CompileOn(job, 4, /*nodes=*/2);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->node_plans.size(), 2u);
  int tasks = 0;
  for (const plan::Plan& node_plan : result->node_plans) {
    for (const plan::Task& task : node_plan.tasks()) {
      EXPECT_EQ(task.stream().device().node(), node_plan.node());
      EXPECT_TRUE(task.has_index());
      ++tasks;
    }
  }
  EXPECT_EQ(tasks, result->plan.tasks_size());
}

}  // namespace
}  // namespace loom::compiler::testing
