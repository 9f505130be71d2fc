#ifndef LOOM_CORE_LEARNING_RATE_SCHEDULE_H_
#define LOOM_CORE_LEARNING_RATE_SCHEDULE_H_

// A learning-rate schedule as the optimizer kernels apply it (Job.optimizer's
// learning_rate_schedule, which the compiler writes into every optimizer kernel's attributes):
// linear warmup to the peak rate, then constant, linear or cosine decay to a floor. One
// definition, shared by the compiler (validation) and the kernels (the rate of each step);
// tests/oracle/reference.py mirrors its arithmetic for PyTorch's LambdaLR.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom {

enum class LearningRateDecay { kConstant, kLinear, kCosine };

struct LearningRateSchedule {
  // Steps of linear warmup: step s < warmup_steps runs at (s + 1) / warmup_steps of the peak.
  int64_t warmup_steps = 0;
  LearningRateDecay decay = LearningRateDecay::kConstant;
  // Linear and cosine decay: from the peak at step warmup_steps to the floor at step decay_steps
  // (0-based, warmup included); from then on the floor.
  int64_t decay_steps = 0;
  // The floor as a fraction of the peak rate, in [0, 1].
  double min_ratio = 0.0;
};

// The learning rate of optimizer step `step` (0-based: the update applied after the first step's
// gradients is step 0; a resumed job's steps continue the count) as a fraction of the peak:
//   step < warmup:          (step + 1) / warmup
//   constant:               1
//   step >= decay_steps:    min_ratio
//   otherwise, p = (step - warmup) / (decay_steps - warmup):
//     linear:  min_ratio + (1 - min_ratio) * (1 - p)
//     cosine:  min_ratio + (1 - min_ratio) * 0.5 * (1 + cos(pi p))
// in double precision, as Python computes PyTorch's LambdaLR factors.
double LearningRateFactor(const LearningRateSchedule& schedule, int64_t step);

// OK, or INVALID_ARGUMENT saying which field is wrong: negative steps, a decay that ends before
// its warmup does, a floor outside [0, 1].
absl::Status ValidateLearningRateSchedule(const LearningRateSchedule& schedule);

// The decay's name in kernel attributes and flags ("constant", "linear", "cosine") and back.
absl::string_view LearningRateDecayName(LearningRateDecay decay);
absl::StatusOr<LearningRateDecay> ParseLearningRateDecay(absl::string_view name);

}  // namespace loom

#endif  // LOOM_CORE_LEARNING_RATE_SCHEDULE_H_
