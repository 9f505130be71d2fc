#ifndef LOOM_TOOLS_LOOMCTL_EXECUTION_OPTIONS_H_
#define LOOM_TOOLS_LOOMCTL_EXECUTION_OPTIONS_H_

// What `loomctl run` and `loomctl run-plan` share of their flags: ExecutionOptions (trace and its
// steps, fetch directory, stall timeout, BLAS threads, output format, verbosity), which RunOptions
// and RunPlanOptions extend, and ParseExecutionFlags, which reads them.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cli/arguments.h"
#include "proto/loom/v1/job_service.pb.h"
#include "tools/loomctl/job_summary.h"

namespace loom::loomctl {

// What `run` and `run-plan` share: how the job executes and what it writes.
struct ExecutionOptions {
  // Empty: no trace.
  std::string trace_path;
  // With a trace: only these steps' acts (1-based, as the step lines count); unset: every act.
  std::optional<v1::StepRange> trace_steps;
  // Empty: write nothing to files.
  std::string fetch_directory;
  absl::Duration stall_timeout = absl::Seconds(10);
  int blas_threads = 1;
  OutputFormat output = OutputFormat::kText;
  bool verbose = false;
};

// Reads --trace, --trace-steps, --fetch-dir, --stall-timeout, --blas-threads, --output and
// --verbose into `options`. INVALID_ARGUMENT naming the flag (and `command`) when a value is
// malformed.
absl::Status ParseExecutionFlags(const char* command, const cli::ParsedArguments& arguments,
                                 ExecutionOptions* options);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_EXECUTION_OPTIONS_H_
