#ifndef LOOM_CORE_PLAN_STEPS_H_
#define LOOM_CORE_PLAN_STEPS_H_

// Training steps of a plan: RecordedSteps (the steps whose acts a job records), how a task's pieces
// map to steps (PiecesPerStep, StepOfPiece) and how many steps a plan runs (StepsOfPlan). The job
// options, the stream threads, the Chrome trace, the compiler and loomctl's run commands use them.

#include <algorithm>
#include <cstdint>
#include <limits>

#include "proto/plan.pb.h"

namespace loom {

// The training steps whose acts a job records (JobOptions::recorded_steps): steps `first` to
// `last` of the job, both included, counted from 0. The default is every step.
struct RecordedSteps {
  int64_t first = 0;
  int64_t last = std::numeric_limits<int64_t>::max();

  bool Contains(int64_t step) const { return step >= first && step <= last; }
};

// How many of `task`'s pieces make one step (Task.pieces_per_step; unset: 1).
inline int64_t PiecesPerStep(const plan::Task& task) {
  return std::max<int64_t>(1, task.pieces_per_step());
}

// The step (from 0) that `task`'s piece belongs to.
inline int64_t StepOfPiece(const plan::Task& task, int64_t piece) {
  return piece / PiecesPerStep(task);
}

// The training steps `plan` runs: the most of its tasks' num_pieces (SOURCE, VARIABLE) over
// their pieces per step; 0 when no task counts pieces.
inline int64_t StepsOfPlan(const plan::Plan& plan) {
  int64_t steps = 0;
  for (const plan::Task& task : plan.tasks()) {
    steps = std::max(steps, task.num_pieces() / PiecesPerStep(task));
  }
  return steps;
}

}  // namespace loom

#endif  // LOOM_CORE_PLAN_STEPS_H_
