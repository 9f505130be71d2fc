#ifndef LOOM_TOOLS_LOOMCTL_RUN_COMMAND_H_
#define LOOM_TOOLS_LOOMCTL_RUN_COMMAND_H_

// `loomctl run`: RunSubcommand, its flags and options (RunOptions), and RunJob, which compiles a
// job and runs the whole plan in this process, printing step lines for a training job and writing
// checkpoints with --save-dir. Also how it writes and prints each step's fetched tensors
// (WriteFetchedTensors, FormatStepsText, FormatStepsJson).

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/arguments.h"
#include "cli/device_spec.h"
#include "core/tensor.h"
#include "tools/loomctl/execution_options.h"
#include "tools/loomctl/job_summary.h"

namespace loom::loomctl {

// `loomctl run JOB --devices cpu:N [flags]`: compiles a job (as `loomctl compile` does) and runs
// the whole plan in this process with the CPU kernels; prints every fetched logical tensor's
// shape and a short summary per step, then the makespan, the acts and every device's peak memory.
//
// Training jobs (Job.loss set) print instead one line per step as the step finishes (the loss is
// fetched even when the job does not ask for it): "step 3/20  loss 5.43210  time 85.2 ms
// tokens/s 12020", or with --output json {"step":3,"loss":5.4321,"step_time_ms":85.2,
// "tokens_per_second":12020.0} (see StepReporter), and draw a progress bar on stderr when stderr
// is a terminal. --init starts from a checkpoint (InitialStateFromCheckpoint); --save-dir DIR
// writes DIR/step-<k>.safetensors every --save-every steps and at the end, and points
// DIR/latest.safetensors (a symbolic link) at the last one. With --save-every K the run is made of
// segments of K steps, each compiled to start from the checkpoint the previous one wrote, so it
// computes exactly what one uninterrupted run computes. The trace and the summary then describe
// the last segment.
//
// Exit codes: 0 the job succeeded; 1 it failed (its error goes to stderr) or its results could
// not be written; 2 on a usage error, a job file that cannot be read, or a job that does not
// compile.
cli::Subcommand RunSubcommand();

struct RunOptions : ExecutionOptions {
  std::string job_path;
  cli::DeviceSpec devices;
  // 0: the job's num_steps.
  int64_t steps = 0;
  // Print run-plan's per-actor table too (text output).
  bool actors = false;
  // --init: a safetensors checkpoint to start from (empty: the job's initializers).
  std::string init_path;
  // --save-dir: where checkpoints go (empty: none are written).
  std::string save_directory;
  // --save-every: also checkpoint every this many steps (0: only at the end).
  int64_t save_every = 0;
};

// The flags of run.
cli::ArgumentSpec RunArgumentSpec();
// INVALID_ARGUMENT naming the flag when a value is malformed or --devices is missing.
absl::StatusOr<RunOptions> RunOptionsFrom(const cli::ParsedArguments& arguments);

// The whole command on parsed options; returns the exit code.
int RunJob(const RunOptions& options, std::ostream& out, std::ostream& error);

// Fetched logical tensors by name, one per step (what RunPlanLocally returns).
using FetchedTensors = std::map<std::string, std::vector<HostTensor>>;

// Writes every fetched tensor of every step as `<directory>/<tensor>_step<k>.npy` (the tensor's
// name made file-safe with FileNamePart); creates the directory. Returns the paths written,
// per step, then per tensor.
absl::StatusOr<std::vector<std::string>> WriteFetchedTensors(const FetchedTensors& fetched,
                                                             const std::string& directory);

// The per-step table: step, tensor, data type, shape, mean, max |x|, one row per tensor and step.
absl::StatusOr<std::string> FormatStepsText(const FetchedTensors& fetched);

// One JSON object per step and line: {"step":K,"tensors":{"NAME":{"data_type":...,"shape":[...],
// "mean":...,"max_abs":...,"file":...}}}; "file" only when `fetch_directory` is set (the path
// WriteFetchedTensors writes), NaN and infinities as null.
absl::StatusOr<std::string> FormatStepsJson(const FetchedTensors& fetched,
                                            const std::string& fetch_directory);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_RUN_COMMAND_H_
