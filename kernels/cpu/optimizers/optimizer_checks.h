#ifndef LOOM_KERNELS_CPU_OPTIMIZERS_OPTIMIZER_CHECKS_H_
#define LOOM_KERNELS_CPU_OPTIMIZERS_OPTIMIZER_CHECKS_H_

// The checks that the optimizer kernel factories share (element-wise update shapes, the step piece,
// "first_step", the learning rate and its schedule, finite float attributes and their bounds), with
// messages that start with the op type. The CPU sgd, adamw and clipping kernels and the CUDA
// optimizer kernels use them.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/learning_rate_schedule.h"
#include "kernels/attributes.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// Checks shared by the optimizer kernel factories. Every message starts with the op type
// ("sgd: ..."); the registry adds the task.

// An element-wise update: `input_names.size()` inputs and `output_names.size()` outputs, all
// float32 and all of the shape of input 0 (the parameter). The names are how messages refer to the
// tensors, for example {"param", "grad"}.
absl::Status CheckElementwiseUpdate(absl::string_view op_type, const KernelInit& init,
                                    const std::vector<absl::string_view>& input_names,
                                    const std::vector<absl::string_view>& output_names);

// The piece of a training step is its index, so it must not be negative.
absl::Status CheckStepPiece(absl::string_view op_type, int64_t piece);

// The int attribute "first_step" (default 0, must be >= 0): the steps the optimizer took before
// piece 0, when a job resumes from a checkpoint.
absl::StatusOr<int64_t> GetFirstStep(absl::string_view op_type, const Attributes& attributes);

// The learning rate of every step: the peak rate "lr" (required, finite, >= 0) and its schedule
// ("lr_warmup_steps", "lr_decay": constant | linear | cosine, "lr_decay_steps", "lr_min_ratio";
// absent: constant), as the compiler writes them (core/learning_rate_schedule.h).
struct ScheduledLearningRate {
  double peak = 0.0;
  LearningRateSchedule schedule;
  // The rate of optimizer step `step` (0-based, first_step included), in double precision.
  double At(int64_t step) const { return peak * LearningRateFactor(schedule, step); }
};
absl::StatusOr<ScheduledLearningRate> GetLearningRate(absl::string_view op_type,
                                                      const Attributes& attributes);

// The float attribute `name`, which is required and must be finite.
absl::StatusOr<double> GetFiniteFloat(absl::string_view op_type, const Attributes& attributes,
                                      const std::string& name);
// The float attribute `name`, or `default_value` when it is absent; it must be finite.
absl::StatusOr<double> GetFiniteFloat(absl::string_view op_type, const Attributes& attributes,
                                      const std::string& name, double default_value);

// `value` >= 0.
absl::Status CheckNonNegative(absl::string_view op_type, absl::string_view name, double value);
// `value` > 0.
absl::Status CheckPositive(absl::string_view op_type, absl::string_view name, double value);
// 0 <= `value` < 1 (an exponential decay rate).
absl::Status CheckDecayRate(absl::string_view op_type, absl::string_view name, double value);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_OPTIMIZERS_OPTIMIZER_CHECKS_H_
