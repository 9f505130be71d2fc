// core/learning_rate_schedule.h: the factors of warmup and of each decay at their boundaries,
// the checks, and the decay names.

#include "core/learning_rate_schedule.h"

#include <cmath>
#include <numbers>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(LearningRateScheduleTest, WarmupRisesLinearlyToThePeak) {
  const LearningRateSchedule schedule{.warmup_steps = 4};
  EXPECT_EQ(LearningRateFactor(schedule, 0), 0.25);
  EXPECT_EQ(LearningRateFactor(schedule, 1), 0.5);
  EXPECT_EQ(LearningRateFactor(schedule, 3), 1.0);
  EXPECT_EQ(LearningRateFactor(schedule, 4), 1.0);
  EXPECT_EQ(LearningRateFactor(schedule, 1000), 1.0);
  EXPECT_EQ(LearningRateFactor(LearningRateSchedule{}, 0), 1.0);
}

TEST(LearningRateScheduleTest, CosineAndLinearDecayFromThePeakToTheFloor) {
  LearningRateSchedule schedule{
      .warmup_steps = 2, .decay = LearningRateDecay::kCosine, .decay_steps = 12, .min_ratio = 0.1};
  EXPECT_EQ(LearningRateFactor(schedule, 1), 1.0);
  EXPECT_EQ(LearningRateFactor(schedule, 2), 1.0);            // the peak, progress 0
  EXPECT_NEAR(LearningRateFactor(schedule, 7), 0.55, 1e-15);  // half way: the mean
  EXPECT_EQ(LearningRateFactor(schedule, 7),
            0.1 + 0.9 * (0.5 * (1.0 + std::cos(std::numbers::pi * 0.5))));
  EXPECT_EQ(LearningRateFactor(schedule, 12), 0.1);
  EXPECT_EQ(LearningRateFactor(schedule, 100), 0.1);
  for (int64_t step = 2; step < 12; ++step) {
    EXPECT_GT(LearningRateFactor(schedule, step), LearningRateFactor(schedule, step + 1)) << step;
  }
  schedule.decay = LearningRateDecay::kLinear;
  EXPECT_EQ(LearningRateFactor(schedule, 2), 1.0);
  EXPECT_NEAR(LearningRateFactor(schedule, 7), 0.55, 1e-15);
  EXPECT_NEAR(LearningRateFactor(schedule, 11), 0.1 + 0.9 * 0.1, 1e-15);
  EXPECT_EQ(LearningRateFactor(schedule, 12), 0.1);
}

TEST(LearningRateScheduleTest, BadSchedulesNameTheField) {
  absl::Status status = ValidateLearningRateSchedule({.warmup_steps = -1});
  EXPECT_THAT(std::string(status.message()), HasSubstr("warmup_steps is -1"));
  status = ValidateLearningRateSchedule(
      {.warmup_steps = 5, .decay = LearningRateDecay::kLinear, .decay_steps = 5});
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("linear decay ends at step 5, not after the warmup's 5 steps"));
  status = ValidateLearningRateSchedule({.min_ratio = -0.5});
  EXPECT_THAT(std::string(status.message()), HasSubstr("the floor is -0.5 of the peak rate"));
  status = ValidateLearningRateSchedule({.min_ratio = std::nan("")});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateLearningRateSchedule(
                  {.warmup_steps = 5, .decay = LearningRateDecay::kConstant, .decay_steps = 0})
                  .ok());
}

TEST(LearningRateScheduleTest, DecayNamesRoundTrip) {
  for (LearningRateDecay decay :
       {LearningRateDecay::kConstant, LearningRateDecay::kLinear, LearningRateDecay::kCosine}) {
    absl::StatusOr<LearningRateDecay> parsed = ParseLearningRateDecay(LearningRateDecayName(decay));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, decay);
  }
  EXPECT_THAT(std::string(ParseLearningRateDecay("step").status().message()),
              HasSubstr("unknown learning-rate decay 'step' (constant, linear or cosine)"));
}

}  // namespace
}  // namespace loom
