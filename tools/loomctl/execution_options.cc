#include "tools/loomctl/execution_options.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/step_range.h"

namespace loom::loomctl {

absl::Status ParseExecutionFlags(const char* command, const cli::ParsedArguments& arguments,
                                 ExecutionOptions* options) {
  options->verbose = arguments.Switch("verbose");
  if (arguments.Has("trace")) {
    options->trace_path = arguments.Value("trace");
    if (options->trace_path.empty()) return cli::UsageError(command, "--trace needs a file path");
  }
  absl::StatusOr<std::optional<v1::StepRange>> trace_steps =
      cli::TraceStepsFlag(command, arguments, !options->trace_path.empty());
  if (!trace_steps.ok()) return trace_steps.status();
  options->trace_steps = *trace_steps;
  if (arguments.Has("fetch-dir")) {
    options->fetch_directory = arguments.Value("fetch-dir");
    if (options->fetch_directory.empty())
      return cli::UsageError(command, "--fetch-dir needs a directory");
  }

  std::string stall_timeout = arguments.Value("stall-timeout");
  if (!absl::ParseDuration(stall_timeout, &options->stall_timeout)) {
    return cli::UsageError(command,
                           absl::StrCat("--stall-timeout: '", stall_timeout,
                                        "' is not a duration (write e.g. 500ms, 10s or 2m)"));
  }
  if (options->stall_timeout <= absl::ZeroDuration()) {
    return cli::UsageError(command,
                           absl::StrCat("--stall-timeout must be positive, not ", stall_timeout));
  }

  std::string blas_threads = arguments.Value("blas-threads");
  if (!absl::SimpleAtoi(blas_threads, &options->blas_threads) || options->blas_threads < 1) {
    return cli::UsageError(
        command,
        absl::StrCat("--blas-threads must be a whole number >= 1, not '", blas_threads, "'"));
  }

  std::string output = arguments.Value("output");
  if (output == "text") {
    options->output = OutputFormat::kText;
  } else if (output == "json") {
    options->output = OutputFormat::kJson;
  } else {
    return cli::UsageError(command,
                           absl::StrCat("--output must be 'text' or 'json', not '", output, "'"));
  }
  return absl::OkStatus();
}

}  // namespace loom::loomctl
