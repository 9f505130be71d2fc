// ZB-V (PipelineSchedule ZERO_BUBBLE_V): 2p stages V-shaped over p groups of devices, weight
// gradients deferred as under ZB-H1; every stash gets p slots and the priorities run forwards
// (a later stage's first), then input gradients, then weight gradients (an earlier stage's
// first). A run holds at most p micro-batches of a device's two stages (1F1B's first-stage
// memory, on every device); the GPT trains bit for bit as under 1F1B; placements that are not
// V-shaped are refused.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "node/local_run.h"
#include "testing/pipeline_analysis.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/gpt_layouts.h"
#include "tests/compiler/placed_sleep_pipeline.h"
#include "tests/compiler/run_util.h"

namespace loom::compiler::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kGroups = 4;  // p
constexpr int kStages = 2 * kGroups;
constexpr int kMicroBatches = 8;

// The group of devices that holds stage k: k, then 2p - 1 - k.
int GroupOf(int stage) { return stage < kGroups ? stage : kStages - 1 - stage; }

// kStages stages V-shaped on cpu:0..3 (F, B and W of each stage as given).
job::Job VPipeline(int forward_us, int backward_us, int weight_us) {
  PlacedSleepPipeline pipeline{.schedule = job::ZERO_BUBBLE_V,
                               .micro_batches = kMicroBatches,
                               .forward_us = forward_us,
                               .backward_us = backward_us,
                               .weight_us = weight_us};
  for (int k = 0; k < kStages; ++k) {
    pipeline.placements.push_back({absl::StrCat("cpu:", GroupOf(k))});
  }
  return PlacedSleepPipelineJob(pipeline);
}

TEST(ZeroBubbleVTest, StagesGoVShapedWithPSlotsAndPriorities) {
  absl::StatusOr<CompileResult> compiled = CompileOn(VPipeline(0, 0, 1), kGroups);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const plan::Plan& plan = compiled->plan;
  const std::map<std::string, int> slots = SlotsOf(plan);
  for (int k = 0; k < kStages; ++k) {
    SCOPED_TRACE(absl::StrCat("stage ", k));
    const int round = k / kGroups;
    const plan::Task* forward = TaskNamed(plan, absl::StrCat("mm", k, "@0"));
    const plan::Task* input_gradient = TaskNamed(plan, absl::StrCat("grad/slow", k, "/sleep@0"));
    // The weight's gradient (through its sleep: W), deferred.
    const plan::Task* weight_gradient = TaskNamed(plan, absl::StrCat("grad/weight", k, "/sleep@0"));
    const plan::Task* matmul_weight_gradient = TaskNamed(plan, MatmulWeightGradientTask(k));
    ASSERT_NE(forward, nullptr);
    ASSERT_NE(input_gradient, nullptr);
    ASSERT_NE(weight_gradient, nullptr);
    ASSERT_NE(matmul_weight_gradient, nullptr);
    EXPECT_EQ(forward->stream().device().index(), GroupOf(k));
    EXPECT_EQ(forward->priority(), 2 + round);
    EXPECT_EQ(input_gradient->priority(), -1 - round);
    EXPECT_EQ(weight_gradient->priority(), -3 - round);
    EXPECT_EQ(matmul_weight_gradient->priority(), -3 - round);
    // What W reads (the matmul's input, the output gradient) and what B reads: p slots each.
    EXPECT_EQ(slots.at(matmul_weight_gradient->inputs(0)), kGroups);
    EXPECT_EQ(slots.at(matmul_weight_gradient->inputs(1)), kGroups);
    // No lookahead: W acts whenever nothing else is ready.
    EXPECT_TRUE(matmul_weight_gradient->input_lookahead().empty());
  }
}

TEST(ZeroBubbleVTest, NoDeviceHoldsMoreThanPMicroBatchesOfItsTwoStages) {
  // F, B and W of 2 ms a stage (half a device's share each).
  absl::StatusOr<CompileResult> compiled = CompileOn(VPipeline(2000, 2000, 2000), kGroups);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  KernelRegistry kernels;
  ASSERT_TRUE(RegisterCpuKernels(&kernels).ok());
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(compiled->plan, kernels, JobOptions{});
  ASSERT_TRUE(run.ok()) << run.status();
  const std::vector<StageSchedule> devices = AnalyzePipeline(
      run->runtime->events(), PipelineRolesByDevice(compiled->plan, job::ZERO_BUBBLE_V), kGroups);
  ASSERT_EQ(devices.size(), static_cast<size_t>(kGroups));
  const std::vector<int64_t> stashed =
      PeakStashedPerDevice(compiled->plan, run->runtime->events(), kStages, kGroups);
  for (int group = 0; group < kGroups; ++group) {
    SCOPED_TRACE(absl::StrCat("device ", group, ": ", devices[group].order));
    // F, B and W of each of the device's two stages for every micro-batch.
    EXPECT_EQ(devices[group].order.size(), 3u * 2 * kMicroBatches);
    // p slots on each of the two stages' stashes.
    EXPECT_LE(stashed[group], 2 * kGroups);
  }
  // The first device, whose first stage's forwards wait for nothing, holds micro-batches of both
  // its stages at once (the simulator fills all 2p credits; a run reaches 7 or 8 of them).
  EXPECT_GT(stashed[0], kGroups);
  // The last stage (on device 0) runs its first input gradient before any weight gradient.
  const std::string& first = devices[0].order;
  EXPECT_LT(first.find('B'), first.find('W')) << first;
}

TEST(ZeroBubbleVTest, PlacementsThatAreNotVShapedAreRefused) {
  struct Case {
    std::string what;
    std::vector<std::vector<std::string>> placements;
    std::string message;
  };
  const Case cases[] = {
      {"odd stages", {{"cpu:0"}, {"cpu:1"}, {"cpu:0"}}, "the job's ops use 3 stages"},
      {"round-robin",
       {{"cpu:0"}, {"cpu:1"}, {"cpu:0"}, {"cpu:1"}},
       "stage 2's placement differs from stage 1's"},
      {"one group twice",
       {{"cpu:0"}, {"cpu:0"}, {"cpu:0"}, {"cpu:0"}},
       "stage 1 shares a device with an earlier stage of its round"},
  };
  for (const Case& test : cases) {
    SCOPED_TRACE(test.what);
    absl::StatusOr<CompileResult> compiled = CompileOn(
        PlacedSleepPipelineJob({.placements = test.placements, .schedule = job::ZERO_BUBBLE_V}), 2);
    ASSERT_FALSE(compiled.ok());
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(compiled.status().message(), HasSubstr(test.message));
    EXPECT_THAT(compiled.status().message(), HasSubstr("ZERO_BUBBLE_V"));
  }
}

// ---- The GPT trains bit for bit as under 1F1B ----

class ZeroBubbleVGptTest : public ::testing::TestWithParam<GptLayout> {};

TEST_P(ZeroBubbleVGptTest, LossesEqualOneForwardOneBackwardBitForBit) {
  const GptLayout& reference = GetParam();  // 1F1B, a stage per group
  GptLayout v_shaped = reference;
  v_shaped.schedule = job::ZERO_BUBBLE_V;
  ExpectTrainsBitForBitAs(reference, v_shaped);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ZeroBubbleVGptTest,
                         ::testing::ValuesIn(PipelineScheduleLayouts()),
                         [](const ::testing::TestParamInfo<GptLayout>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace loom::compiler::testing
