#include "tools/loomctl/submit_command.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/parse_options_and_run.h"
#include "cli/step_range.h"
#include "client/initial_state.h"
#include "compiler/compiler.h"
#include "tools/loomctl/cluster_connection.h"
#include "tools/loomctl/fetch_directory.h"
#include "tools/loomctl/job_summary.h"
#include "tools/loomctl/job_watch.h"
#include "tools/loomctl/trace_file.h"

namespace loom::loomctl {
namespace {

constexpr char kCommand[] = "loomctl submit";

int RunSubmit(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& error) {
  const cli::ArgumentSpec spec = SubmitArgumentSpec();
  int exit_code = cli::kExitSuccess;
  std::optional<cli::ParsedArguments> parsed =
      cli::ParseOrReport(spec, arguments, out, error, &exit_code);
  if (!parsed.has_value()) return exit_code;
  absl::StatusOr<ClusterCommandOptions> options = ClusterOptionsFrom(kCommand, *parsed);
  if (!options.ok()) {
    error << options.status().message() << "\n";
    return cli::kExitUsage;
  }
  int64_t steps = 0;
  if (parsed->Has("steps") && (!absl::SimpleAtoi(parsed->Value("steps"), &steps) || steps < 1)) {
    error << cli::UsageError(kCommand, absl::StrCat("--steps must be a whole number >= 1, not '",
                                                    parsed->Value("steps"), "'"))
                 .message()
          << "\n";
    return cli::kExitUsage;
  }

  const std::string trace_path = parsed->Value("trace");
  if (parsed->Has("trace") && (trace_path.empty() || !parsed->Switch("watch"))) {
    error << cli::UsageError(kCommand,
                             "--trace needs a file path, and --watch (the trace is there "
                             "once the job ends)")
                 .message()
          << "\n";
    return cli::kExitUsage;
  }

  absl::StatusOr<std::optional<v1::StepRange>> trace_steps =
      cli::TraceStepsFlag(kCommand, *parsed, !trace_path.empty());
  if (!trace_steps.ok()) {
    error << trace_steps.status().message() << "\n";
    return cli::kExitUsage;
  }

  const std::string fetch_directory = parsed->Value("fetch-dir");
  if (parsed->Has("fetch-dir") && (fetch_directory.empty() || !parsed->Switch("watch"))) {
    error << cli::UsageError(kCommand,
                             "--fetch-dir needs a directory, and --watch (the fetched tensors are "
                             "written as the watch receives them)")
                 .message()
          << "\n";
    return cli::kExitUsage;
  }

  if (parsed->Has("checkpoint") && parsed->Value("checkpoint").empty()) {
    error << cli::UsageError(kCommand, "--checkpoint needs a file path").message() << "\n";
    return cli::kExitUsage;
  }
  int64_t checkpoint_every = 0;
  if (parsed->Has("checkpoint-every")) {
    if (!absl::SimpleAtoi(parsed->Value("checkpoint-every"), &checkpoint_every) ||
        checkpoint_every < 1 || !parsed->Has("checkpoint")) {
      error << cli::UsageError(kCommand,
                               absl::StrCat("--checkpoint-every must be a whole number >= 1, "
                                            "with --checkpoint (where to save), not '",
                                            parsed->Value("checkpoint-every"), "'"))
                   .message()
            << "\n";
      return cli::kExitUsage;
    }
  }

  const std::string& path = parsed->positionals().at(0);
  absl::StatusOr<job::Job> job = compiler::ReadJobFile(path);
  if (!job.ok()) {
    error << kCommand << ": " << job.status().message() << "\n";
    return cli::kExitUsage;
  }
  if (steps > 0) job->set_num_steps(steps);
  if (parsed->Has("init")) {
    // The daemons read the file: a relative path means this directory (a cluster on this host).
    const std::string& init = parsed->Value("init");
    std::error_code failed;
    const std::string absolute = init.empty() ? "" : std::filesystem::absolute(init, failed);
    const absl::Status status = init.empty() ? absl::InvalidArgumentError("needs a checkpoint path")
                                : failed     ? absl::InvalidArgumentError(failed.message())
                                             : StartFromCheckpoint(absolute, &*job).status();
    if (!status.ok()) {
      error << kCommand << ": --init '" << init << "': " << status.message() << "\n";
      return cli::kExitUsage;
    }
  }

  if (!fetch_directory.empty()) {
    absl::Status usable = CheckFetchedFileNames({job->fetch().begin(), job->fetch().end()});
    if (usable.ok()) usable = CreateFetchDirectory(fetch_directory);
    if (!usable.ok()) {
      error << kCommand << ": --fetch-dir: " << usable.message() << "\n";
      return cli::kExitUsage;
    }
  }

  std::unique_ptr<ClusterClient> client = ConnectOrReport(kCommand, *options, error);
  if (client == nullptr) return cli::kExitUnreachable;
  SubmitJobOptions submit_options;
  submit_options.stream_fetches = !fetch_directory.empty();
  submit_options.trace = !trace_path.empty();
  submit_options.trace_steps = *trace_steps;
  submit_options.checkpoint_every_steps = checkpoint_every;
  submit_options.overwrite_checkpoint = parsed->Switch("overwrite-checkpoint");
  if (submit_options.overwrite_checkpoint && !parsed->Has("checkpoint")) {
    error << cli::UsageError(kCommand, "--overwrite-checkpoint needs --checkpoint").message()
          << "\n";
    return cli::kExitUsage;
  }
  if (parsed->Has("checkpoint")) {
    // The daemons resolve the path: a relative one means this directory (a cluster on this host).
    std::error_code failed;
    submit_options.checkpoint_path =
        std::filesystem::absolute(parsed->Value("checkpoint"), failed).string();
    if (failed) {
      error << kCommand << ": --checkpoint '" << parsed->Value("checkpoint")
            << "': " << failed.message() << "\n";
      return cli::kExitUsage;
    }
  }
  absl::StatusOr<v1::JobInfo> submitted = client->SubmitJob(*job, submit_options);
  if (!submitted.ok()) {
    return ReportRpcError(
        kCommand,
        absl::Status(submitted.status().code(), absl::StrCat("job '", job->name(), "' from ", path,
                                                             ": ", submitted.status().message())),
        error);
  }
  if (options->output == OutputFormat::kJson) {
    out << MessageToJsonLine(*submitted);
  } else {
    out << submitted->job_id() << "\n";
  }
  out.flush();
  if (!parsed->Switch("watch")) return cli::kExitSuccess;
  const int watched = WatchJobAndReport(kCommand, *client, submitted->job_id(), options->output,
                                        out, error, fetch_directory);
  if (watched == cli::kExitSuccess && !submit_options.checkpoint_path.empty()) {
    error << "checkpoint: " << submit_options.checkpoint_path << "\n";
  }
  if (trace_path.empty() || watched == cli::kExitUnreachable) return watched;
  if (watched > 128) {
    // Interrupted (128 + a signal): the job runs on, and has no trace yet.
    error << kCommand << ": 'loomctl trace " << submitted->job_id() << " " << trace_path
          << "' writes its trace once it ends\n";
    return watched;
  }
  // The acts of a failed or cancelled job are worth a look too.
  const int written = WriteTraceFile(kCommand, *client, submitted->job_id(), trace_path, error);
  if (written != cli::kExitSuccess)
    return watched == cli::kExitSuccess ? cli::kExitFailure : watched;
  return watched;
}

}  // namespace

cli::Subcommand SubmitSubcommand() {
  return cli::Subcommand{"submit", "submit a job to the cluster; --watch follows it to its end",
                         RunSubmit};
}

cli::ArgumentSpec SubmitArgumentSpec() {
  cli::ArgumentSpec spec(
      kCommand,
      "Reads a job file (as 'loomctl run' does) and submits it to the coordinator, which\n"
      "compiles it for the cluster's devices and queues it. Prints the job's id (--output json:\n"
      "its JobInfo as one JSON object).\n\n"
      "--watch then follows the job until it ends: a line per state change and per training\n"
      "step (step, loss, step time, tokens/s), with a progress bar (step, loss, tokens/s, ETA)\n"
      "on stderr when it is a terminal; --output json prints every event as one JSON object\n"
      "per line (a fetched tensor's without its data). With --fetch-dir the job's fetched\n"
      "tensors are written as .npy files as they come. When the job fails or is cancelled,\n"
      "its error goes to stderr. Ctrl-C stops watching; the job goes on ('loomctl cancel\n"
      "JOB_ID' stops it).\n\n"
      "Exit codes: 0 submitted (with --watch: the job succeeded); 1 the job failed (or a\n"
      "fetched tensor could not be written); 2 usage error or the job file cannot be read;\n"
      "3 the job was cancelled; 4 the daemon refused the job (e.g. INVALID_ARGUMENT naming\n"
      "the op); 5 no daemon answered or the connection broke.");
  spec.AddPositional("JOB", "the job: protobuf text format (.pbtxt), JSON (.json) or binary (.pb)")
      .AddSwitch("watch", "follow the job until it ends; the exit code says how it ended")
      .AddFlag("steps", "S", "", "run S steps (default: the job's num_steps)")
      .AddFlag("trace", "PATH", "",
               "with --watch: every node records every act, and once the job ended its Chrome "
               "trace is written to PATH (a few bytes per act: for a long job, trace a few steps "
               "with --trace-steps)")
      .AddFlag("trace-steps", "K[-L]", "",
               "with --trace: record only the acts of step K (to step L), counted from 1 as the "
               "progress lines count them, e.g. --trace-steps 100-101")
      .AddFlag("fetch-dir", "DIR", "",
               "with --watch: the job's fetched tensors (its 'fetch' list) come to this client "
               "as they are computed, and are written to DIR as <tensor>_step<k>.npy, one file "
               "per piece (k counts the pieces over the job: a step, or a micro-batch of a step), "
               "as 'loomctl run --fetch-dir' writes them. The coordinator refuses a job that "
               "would stream more than its --max-fetched-bytes")
      .AddFlag("checkpoint", "PATH", "",
               "when the job succeeds, its variables (and optimizer state) are saved to PATH, a "
               "safetensors file as 'loomctl run --save-dir' writes (--init PATH resumes from "
               "it, here and in 'loomctl run'). The daemons write it: PATH must lie beneath a "
               "--checkpoint-root of theirs, and its directory must exist for the coordinator "
               "and every node of the job (shared storage; any directory on a one-host "
               "cluster). A relative PATH is taken from this directory")
      .AddFlag("init", "PATH", "",
               "start from the safetensors checkpoint PATH (as 'loomctl run --init'): every "
               "variable by name, and the optimizer state and step when it holds them, so the "
               "job goes on where the checkpoint's job stopped and runs its num_steps (or "
               "--steps) more. Read here to check it against the job, and by the daemons: it "
               "must be where they reach it too")
      .AddSwitch("overwrite-checkpoint",
                 "with --checkpoint: replace a file already at PATH that this job did not write "
                 "(without it such a job is refused, ALREADY_EXISTS)")
      .AddFlag("checkpoint-every", "K", "",
               "with --checkpoint: also save every K steps while the job runs, replacing PATH "
               "each time (the job goes on while the nodes write; with --watch a line per "
               "checkpoint). A job that fails or is cancelled leaves the last one, which --init "
               "resumes from");
  AddClusterFlags(spec);
  return spec;
}

}  // namespace loom::loomctl
