// The learning-rate schedule in the optimizer kernels (kernels/cpu/optimizers/optimizer_checks.h,
// core/learning_rate_schedule.h): each step of a scheduled kernel is bit for bit the step of a
// constant-rate kernel at that step's rate; a resumed kernel (first_step) continues the schedule
// exactly; bad schedule attributes are refused naming the op and the attribute.

#include "core/learning_rate_schedule.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/optimizers/optimizer_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 12;

LearningRateSchedule Schedule(LearningRateDecay decay) {
  return LearningRateSchedule{
      .warmup_steps = 3, .decay = decay, .decay_steps = 10, .min_ratio = 0.1};
}

void AddSchedule(OpCall& call, const LearningRateSchedule& schedule) {
  call.Attribute("lr_warmup_steps", IntAttribute(schedule.warmup_steps))
      .Attribute("lr_decay", StringAttribute(std::string(LearningRateDecayName(schedule.decay))))
      .Attribute("lr_decay_steps", IntAttribute(schedule.decay_steps))
      .Attribute("lr_min_ratio", FloatAttribute(schedule.min_ratio));
}

// Describes an optimizer call ("adamw", or "sgd" with momentum) at learning rate `lr`.
void DescribeOptimizer(OpCall& call, const std::string& op_type, double lr,
                       int64_t first_step = 0) {
  call.Attribute("lr", FloatAttribute(lr)).Attribute("weight_decay", FloatAttribute(0.05));
  if (op_type == "sgd") call.Attribute("momentum", FloatAttribute(0.9));
  if (first_step > 0) call.Attribute("first_step", IntAttribute(first_step));
  DeclareTensors(call, {5}, op_type == "adamw" ? 4 : 3, op_type == "adamw" ? 3 : 2);
}

std::vector<std::vector<float>> Gradients() {
  std::vector<std::vector<float>> grads;
  for (int step = 0; step < kSteps; ++step) {
    grads.push_back({0.5f - step * 0.1f, -1.25f, 3.0f / (step + 1), 1e-3f, -0.75f + step});
  }
  return grads;
}

std::vector<std::vector<float>> Initial(const std::string& op_type) {
  std::vector<std::vector<float>> initial = {{1.0f, -2.0f, 0.5f, 3.0f, -0.25f}, {0, 0, 0, 0, 0}};
  if (op_type == "adamw") initial.push_back({0, 0, 0, 0, 0});
  return initial;
}

class ScheduledOptimizerTest
    : public ::testing::TestWithParam<std::tuple<std::string, LearningRateDecay>> {};

// Step k of the scheduled kernel equals a constant-rate kernel at rate lr * factor(k) applied to
// the scheduled run's state before step k, bit for bit.
TEST_P(ScheduledOptimizerTest, EachStepIsTheConstantRateStepAtThatRate) {
  const auto& [op_type, decay] = GetParam();
  const double peak = 0.01;
  const LearningRateSchedule schedule = Schedule(decay);
  OpCall scheduled(op_type);
  DescribeOptimizer(scheduled, op_type, peak);
  AddSchedule(scheduled, schedule);
  const std::vector<std::vector<float>> grads = Gradients();
  absl::StatusOr<OptimizerSteps> steps =
      RunOptimizer(scheduled, {5}, Initial(op_type), grads, /*in_place=*/true);
  ASSERT_TRUE(steps.ok()) << steps.status();
  std::vector<std::vector<float>> state = Initial(op_type);
  for (int step = 0; step < kSteps; ++step) {
    const double rate = peak * LearningRateFactor(schedule, step);
    // The constant-rate kernel at piece `step` (AdamW's bias correction counts the steps).
    OpCall constant(op_type);
    DescribeOptimizer(constant, op_type, rate);
    absl::StatusOr<OptimizerSteps> one =
        RunOptimizer(constant, {5}, state, {grads[step]}, /*in_place=*/true, step);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ((*one)[0], (*steps)[step]) << "step " << step << " at rate " << rate;
    state = (*steps)[step];
  }
}

// A kernel resumed at step 5 (first_step 5, pieces from 0) continues the schedule exactly.
TEST_P(ScheduledOptimizerTest, AResumedKernelContinuesTheSchedule) {
  const auto& [op_type, decay] = GetParam();
  const LearningRateSchedule schedule = Schedule(decay);
  OpCall straight(op_type);
  DescribeOptimizer(straight, op_type, 0.01);
  AddSchedule(straight, schedule);
  const std::vector<std::vector<float>> grads = Gradients();
  absl::StatusOr<OptimizerSteps> all =
      RunOptimizer(straight, {5}, Initial(op_type), grads, /*in_place=*/true);
  ASSERT_TRUE(all.ok()) << all.status();
  constexpr int kResumeAt = 5;
  OpCall resumed(op_type);
  DescribeOptimizer(resumed, op_type, 0.01, kResumeAt);
  AddSchedule(resumed, schedule);
  absl::StatusOr<OptimizerSteps> rest =
      RunOptimizer(resumed, {5}, (*all)[kResumeAt - 1],
                   std::vector<std::vector<float>>(grads.begin() + kResumeAt, grads.end()),
                   /*in_place=*/true);
  ASSERT_TRUE(rest.ok()) << rest.status();
  for (int step = kResumeAt; step < kSteps; ++step) {
    EXPECT_EQ((*rest)[step - kResumeAt], (*all)[step]) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, ScheduledOptimizerTest,
                         ::testing::Combine(::testing::Values("adamw", "sgd"),
                                            ::testing::Values(LearningRateDecay::kConstant,
                                                              LearningRateDecay::kLinear,
                                                              LearningRateDecay::kCosine)));

TEST(ScheduledOptimizerTest, BadScheduleAttributesAreRefused) {
  struct Case {
    const char* attribute;
    plan::AttributeValue value;
    const char* message;
  };
  const Case cases[] = {
      {"lr_decay", StringAttribute("exponential"), "unknown learning-rate decay 'exponential'"},
      {"lr_warmup_steps", IntAttribute(-1), "warmup_steps is -1"},
      {"lr_min_ratio", FloatAttribute(1.5), "the floor is 1.5 of the peak rate"},
      {"lr_decay_steps", IntAttribute(2), "cosine decay ends at step 2"},
  };
  for (const Case& bad : cases) {
    for (const std::string op_type : {"adamw", "sgd"}) {
      OpCall call(op_type);
      DescribeOptimizer(call, op_type, 0.01);
      AddSchedule(call, Schedule(LearningRateDecay::kCosine));
      call.Attribute(bad.attribute, bad.value);
      absl::Status status = BuildOptimizerKernel(call).status();
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad.attribute << status;
      EXPECT_THAT(std::string(status.message()), HasSubstr(op_type + ": ")) << status;
      EXPECT_THAT(std::string(status.message()), HasSubstr(bad.message)) << status;
    }
  }
}

}  // namespace
}  // namespace loom::kernel_test
