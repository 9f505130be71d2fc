#ifndef LOOM_TOOLS_LOOMCTL_RUN_PLAN_COMMAND_H_
#define LOOM_TOOLS_LOOMCTL_RUN_PLAN_COMMAND_H_

// `loomctl run-plan`: RunPlanSubcommand, its flags and options (RunPlanOptions), and RunPlan,
// which runs a plan file in this process and prints where every actor's time went. Also
// WriteFetchedPieces, which writes every piece the plan's sinks kept as a .npy file.

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/arguments.h"
#include "runtime/job_runtime.h"
#include "tools/loomctl/execution_options.h"
#include "tools/loomctl/job_summary.h"

namespace loom::loomctl {

// `loomctl run-plan PLAN [flags]`: runs a plan file on this machine with the CPU kernels, then
// prints where every actor's time went.
//
// Exit codes: 0 when the job succeeded; 1 when it failed (its error, which names the culprit, goes
// to stderr) or its results could not be written; 2 on a usage error or a plan that cannot be
// read, is invalid or is rejected before it runs (unknown kernel, bad attribute, over a memory
// budget).
cli::Subcommand RunPlanSubcommand();

struct RunPlanOptions : ExecutionOptions {
  std::string plan_path;
};

// The flags of run-plan.
cli::ArgumentSpec RunPlanArgumentSpec();
// INVALID_ARGUMENT naming the flag when a value is malformed.
absl::StatusOr<RunPlanOptions> RunPlanOptionsFrom(const cli::ParsedArguments& arguments);

// The whole command on parsed options; returns the exit code.
int RunPlan(const RunPlanOptions& options, std::ostream& out, std::ostream& error);

// Writes every piece every sink kept as `<directory>/<sink>_<input>_<piece>.npy`, where <input> is
// the register the sink read and <piece> the piece's position in what the sink received; creates
// the directory. Returns the paths written.
absl::StatusOr<std::vector<std::string>> WriteFetchedPieces(const JobRuntime& job,
                                                            const std::string& directory);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_RUN_PLAN_COMMAND_H_
