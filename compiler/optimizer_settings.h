#ifndef LOOM_COMPILER_OPTIMIZER_SETTINGS_H_
#define LOOM_COMPILER_OPTIMIZER_SETTINGS_H_

// What Job.optimizer does to each variable beyond its kind: the learning-rate schedule, checked
// and turned into the schedule the kernels apply, and the parameter groups, resolved per variable
// (its learning-rate scale and weight decay). BuildLogicalGraph checks them; OptimizerKernel
// (compiler/source_kernels.h) writes them into each VARIABLE's kernel.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/learning_rate_schedule.h"
#include "proto/job.pb.h"

namespace loom::compiler {

// The schedule of `optimizer` as a fraction of its peak rate; INVALID_ARGUMENT naming the field
// that is wrong (a floor above the peak rate, a decay that does not end after the warmup,
// negative steps).
absl::StatusOr<LearningRateSchedule> ScheduleOf(const job::Optimizer& optimizer);

// The peak learning rate and weight decay of an optimizer (SGD or AdamW).
double LearningRateOf(const job::Optimizer& optimizer);
double WeightDecayOf(const job::Optimizer& optimizer);

// Whether `name` matches `pattern`, in which '*' matches any run of characters.
bool MatchesVariablePattern(const std::string& pattern, const std::string& name);

// For each of `variables` (names), the position of its parameter group in
// optimizer.parameter_groups(), or -1 for none; INVALID_ARGUMENT naming the variable that two
// groups claim, a pattern that names no variable, or a scale or weight decay that is negative or
// not finite.
absl::StatusOr<std::vector<int>> AssignParameterGroups(const job::Optimizer& optimizer,
                                                       const std::vector<std::string>& variables);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OPTIMIZER_SETTINGS_H_
