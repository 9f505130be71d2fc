// Interleaved 1F1B (PipelineSchedule INTERLEAVED): stages placed round-robin over groups of
// devices get stash slots that add up to Megatron-LM's count per device and priorities that run
// forwards first, later rounds first; a run holds no more than that count on any device; the GPT
// trains bit for bit as under 1F1B; placements that are not round-robin are refused.
#include <map>
#include <string>
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
constexpr int kRounds = 2;  // v
constexpr int kStages = kGroups * kRounds;
constexpr int kMicroBatches = 8;

// `placements` under `schedule`, kMicroBatches micro-batches.
job::Job SleepPipeline(const std::vector<std::vector<std::string>>& placements,
                       job::PipelineSchedule schedule, int forward_us, int backward_us) {
  return PlacedSleepPipelineJob(PlacedSleepPipeline{.placements = placements,
                                                    .schedule = schedule,
                                                    .micro_batches = kMicroBatches,
                                                    .forward_us = forward_us,
                                                    .backward_us = backward_us});
}

// kStages stages, stage k on cpu:(k % kGroups).
job::Job RoundRobinPipeline(int forward_us, int backward_us) {
  std::vector<std::vector<std::string>> placements;
  for (int k = 0; k < kStages; ++k) placements.push_back({absl::StrCat("cpu:", k % kGroups)});
  return SleepPipeline(placements, job::INTERLEAVED, forward_us, backward_us);
}

// Megatron-LM's micro-batches in flight on device group d: 2(p - d - 1) + (v - 1)p + 1 stages'.
int MegatronInFlight(int group) { return 2 * (kGroups - group - 1) + (kRounds - 1) * kGroups + 1; }

TEST(InterleavedTest, StashSlotsAddUpToMegatronsCountPerDevice) {
  absl::StatusOr<CompileResult> compiled = CompileOn(RoundRobinPipeline(0, 0), kGroups);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const plan::Plan& plan = compiled->plan;
  const std::map<std::string, int> slots = SlotsOf(plan);
  std::vector<int> per_device(kGroups, 0);
  for (int k = 0; k < kStages; ++k) {
    SCOPED_TRACE(absl::StrCat("stage ", k));
    const int round = k / kGroups;
    const int group = k % kGroups;
    const plan::Task* forward = TaskNamed(plan, absl::StrCat("mm", k, "@0"));
    const plan::Task* backward = TaskNamed(plan, absl::StrCat("grad/slow", k, "/sleep@0"));
    // The weight's gradient reads the matmul's input: the stage's stash.
    const plan::Task* weight_gradient = TaskNamed(plan, MatmulWeightGradientTask(k));
    ASSERT_NE(forward, nullptr);
    ASSERT_NE(backward, nullptr);
    ASSERT_NE(weight_gradient, nullptr);
    EXPECT_EQ(forward->stream().device().index(), group);
    // Forwards first, a later round's first; then backwards, a later round's first.
    EXPECT_EQ(forward->priority(), kRounds + round);
    EXPECT_EQ(backward->priority(), round - kRounds);
    EXPECT_EQ(weight_gradient->priority(), round - kRounds);
    const int stash = slots.at(weight_gradient->inputs(0));
    EXPECT_EQ(stash, round == 0 ? 2 * kGroups - group - 1 : kGroups - group);
    per_device[group] += stash;
  }
  for (int group = 0; group < kGroups; ++group) {
    EXPECT_EQ(per_device[group], MegatronInFlight(group)) << "device " << group;
  }
}

TEST(InterleavedTest, NoDeviceHoldsMoreThanMegatronsCount) {
  // F 2 ms and B 4 ms a stage (sleeps use no core: eight stages fit on two cores).
  absl::StatusOr<CompileResult> compiled = CompileOn(RoundRobinPipeline(2000, 4000), kGroups);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  KernelRegistry kernels;
  ASSERT_TRUE(RegisterCpuKernels(&kernels).ok());
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(compiled->plan, kernels, JobOptions{});
  ASSERT_TRUE(run.ok()) << run.status();
  const std::vector<StageSchedule> devices =
      AnalyzePipeline(run->runtime->events(),
                      PipelineRolesByDevice(compiled->plan, job::INTERLEAVED, kRounds), kGroups);
  ASSERT_EQ(devices.size(), static_cast<size_t>(kGroups));
  for (int group = 0; group < kGroups; ++group) {
    SCOPED_TRACE(absl::StrCat("device ", group, ": ", devices[group].order));
    // A forward and a backward of each of the device's stages for every micro-batch.
    EXPECT_EQ(devices[group].order.size(), 2u * kRounds * kMicroBatches);
    EXPECT_LE(devices[group].peak_in_flight, MegatronInFlight(group));
  }
  // The first device, whose first round's forwards wait for nothing, fills its credits.
  EXPECT_EQ(devices[0].peak_in_flight, MegatronInFlight(0));
}

TEST(InterleavedTest, PlacementsThatAreNotRoundRobinAreRefused) {
  struct Case {
    std::string what;
    std::vector<std::vector<std::string>> placements;
    std::string message;
  };
  const Case cases[] = {
      {"no repeat",
       {{"cpu:0"}, {"cpu:1"}, {"cpu:2"}, {"cpu:3"}},
       "no stage but stage 0 has stage 0's placement"},
      {"uneven rounds",
       {{"cpu:0"}, {"cpu:1"}, {"cpu:0"}},
       "repeats at stage 2, which does not divide the 3 stages"},
      {"another order",
       {{"cpu:0"}, {"cpu:1"}, {"cpu:0"}, {"cpu:2"}},
       "stage 3's placement differs from stage 1's"},
      {"overlapping groups",
       {{"cpu:0", "cpu:1"}, {"cpu:1", "cpu:2"}, {"cpu:0", "cpu:1"}, {"cpu:1", "cpu:2"}},
       "stage 1 shares a device with an earlier stage of its round"},
  };
  for (const Case& test : cases) {
    SCOPED_TRACE(test.what);
    absl::StatusOr<CompileResult> compiled =
        CompileOn(SleepPipeline(test.placements, job::INTERLEAVED, 0, 0), 4);
    ASSERT_FALSE(compiled.ok());
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(compiled.status().message(), HasSubstr(test.message));
    EXPECT_THAT(compiled.status().message(), HasSubstr("INTERLEAVED"));
  }
  // The same placements under 1F1B are the job's business (stages may share devices).
  absl::StatusOr<CompileResult> one_f_one_b =
      CompileOn(SleepPipeline({{"cpu:0"}, {"cpu:1"}, {"cpu:0"}}, job::ONE_F_ONE_B, 0, 0), 2);
  EXPECT_TRUE(one_f_one_b.ok()) << one_f_one_b.status();
}

// ---- The GPT trains bit for bit as under 1F1B ----

class InterleavedGptTest : public ::testing::TestWithParam<GptLayout> {};

TEST_P(InterleavedGptTest, LossesEqualOneForwardOneBackwardBitForBit) {
  // The reference's layouts are 1F1B's (the blocks split over the stages, one per group).
  const GptLayout& reference = GetParam();
  GptLayout interleaved = reference;
  interleaved.schedule = job::INTERLEAVED;
  interleaved.virtual_stages = 2;
  ExpectTrainsBitForBitAs(reference, interleaved);
}

INSTANTIATE_TEST_SUITE_P(Layouts, InterleavedGptTest,
                         ::testing::ValuesIn(PipelineScheduleLayouts()),
                         [](const ::testing::TestParamInfo<GptLayout>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace loom::compiler::testing
