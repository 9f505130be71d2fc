#ifndef LOOM_COMPILER_EVALUATION_BRANCH_H_
#define LOOM_COMPILER_EVALUATION_BRANCH_H_

// Evaluation while a job trains (Job.evaluation): the branch the compiler adds to the job, a copy
// of the forward ops the evaluated loss depends on that reads the held-out inputs and the same
// variables, and MarkEvaluationTasks, which marks every task of the plan that serves only that
// branch, so that it works only in the evaluation steps (Task.evaluation_every_steps).

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/job.pb.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

// The prefix of the branch's ops, inputs and tensors ("evaluation/x", "evaluation/loss").
inline constexpr char kEvaluationPrefix[] = "evaluation/";

// `job` with its evaluation branch: for Job.evaluation.inputs, inputs "evaluation/<name>" with the
// job input's shape, type, placement and SBP and the given source; a copy "evaluation/<op>" of
// every op the evaluated loss (Evaluation.loss, or the job's loss) depends on, reading the copies'
// tensors, the evaluation inputs and the job's variables, marked Op.evaluation; and the fetch of
// "evaluation/<loss>". nullopt when it has no evaluation (after checking that no op or input
// carries the flag). INVALID_ARGUMENT naming the culprit:
// every_steps < 0, no loss to evaluate, an evaluation input that is no input of the job, sets its
// shape or type differently, has no source or is not read by the loss, a job input the loss reads
// that no evaluation input replaces, a name of the job already starting with the prefix, or
// evaluation flags on ops or inputs of a job without an evaluation.
absl::StatusOr<std::optional<job::Job>> AddEvaluationBranch(const job::Job& job);

// Marks the tasks that serve only the evaluation branch with Task.evaluation_every_steps =
// `every_steps` and Task.first_step = `first_step`: the SOURCE and COMPUTE tasks already marked by
// the lowering (those of Op.evaluation ops and Input.evaluation inputs), every task all of whose
// inputs come from marked tasks (their boxing, sinks), and every task all of whose outputs are
// read by marked tasks only. VARIABLE tasks are never marked.
void MarkEvaluationTasks(plan::Plan& plan, int64_t every_steps, int64_t first_step);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_EVALUATION_BRANCH_H_
