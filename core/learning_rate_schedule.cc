#include "core/learning_rate_schedule.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace loom {

double LearningRateFactor(const LearningRateSchedule& schedule, int64_t step) {
  if (step < schedule.warmup_steps) {
    return static_cast<double>(step + 1) / static_cast<double>(schedule.warmup_steps);
  }
  if (schedule.decay == LearningRateDecay::kConstant) return 1.0;
  if (step >= schedule.decay_steps) return schedule.min_ratio;
  const double progress = static_cast<double>(step - schedule.warmup_steps) /
                          static_cast<double>(schedule.decay_steps - schedule.warmup_steps);
  const double remaining = schedule.decay == LearningRateDecay::kLinear
                               ? 1.0 - progress
                               : 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return schedule.min_ratio + (1.0 - schedule.min_ratio) * remaining;
}

absl::Status ValidateLearningRateSchedule(const LearningRateSchedule& schedule) {
  if (schedule.warmup_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("learning-rate schedule: warmup_steps is ",
                                                   schedule.warmup_steps, "; it must be >= 0"));
  }
  if (schedule.decay != LearningRateDecay::kConstant &&
      schedule.decay_steps <= schedule.warmup_steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "learning-rate schedule: ", LearningRateDecayName(schedule.decay), " decay ends at step ",
        schedule.decay_steps, ", not after the warmup's ", schedule.warmup_steps, " steps"));
  }
  if (!(schedule.min_ratio >= 0.0 && schedule.min_ratio <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("learning-rate schedule: the floor is ",
                                                   schedule.min_ratio,
                                                   " of the peak rate; it must be in [0, 1]"));
  }
  return absl::OkStatus();
}

absl::string_view LearningRateDecayName(LearningRateDecay decay) {
  switch (decay) {
    case LearningRateDecay::kLinear:
      return "linear";
    case LearningRateDecay::kCosine:
      return "cosine";
    default:
      return "constant";
  }
}

absl::StatusOr<LearningRateDecay> ParseLearningRateDecay(absl::string_view name) {
  for (LearningRateDecay decay :
       {LearningRateDecay::kConstant, LearningRateDecay::kLinear, LearningRateDecay::kCosine}) {
    if (name == LearningRateDecayName(decay)) return decay;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown learning-rate decay '", name, "' (constant, linear or cosine)"));
}

}  // namespace loom
