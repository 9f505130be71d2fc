#include "tools/loomctl/run_plan_command.h"

#include <filesystem>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "actors/actor_factory.h"
#include "actors/sink_actor.h"
#include "cli/parse_options_and_run.h"
#include "cli/step_range.h"
#include "compiler/step_proof.h"
#include "core/file_roots.h"
#include "core/plan_steps.h"
#include "glog/logging.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/kernel_registry.h"
#include "node/device_backends.h"
#include "runtime/chrome_trace.h"
#include "runtime/plan_text.h"
#include "runtime/plan_validation.h"
#include "tools/loomctl/fetch_directory.h"
#include "tools/loomctl/npy_writer.h"

namespace loom::loomctl {
namespace {

constexpr char kCommand[] = "loomctl run-plan";

int RunPlanFromArguments(const std::vector<std::string>& arguments, std::ostream& out,
                         std::ostream& error) {
  return cli::ParseOptionsAndRun(RunPlanArgumentSpec(), arguments, RunPlanOptionsFrom, RunPlan, out,
                                 error);
}

}  // namespace

cli::Subcommand RunPlanSubcommand() {
  return cli::Subcommand{"run-plan",
                         "run a plan file on this machine and summarise where time went",
                         RunPlanFromArguments};
}

cli::ArgumentSpec RunPlanArgumentSpec() {
  cli::ArgumentSpec spec(
      kCommand,
      "Runs a physical plan on this machine with the CPU kernels, then prints one "
      "line per actor\n(acts; busy, blocked-on-input, blocked-on-output and "
      "waiting-for-thread time), the makespan\nand every device's peak memory.\n\n"
      "Exit codes: 0 the job succeeded; 1 the job failed (its error names the "
      "culprit); 2 usage\nerror, or the plan cannot be read, is invalid or is "
      "rejected before it runs.");
  spec.AddPositional("PLAN", "the plan: protobuf text format (.pbtxt) or binary (.pb)")
      .AddFlag("trace", "PATH", "",
               "write a Chrome trace of every act to PATH (open in ui.perfetto.dev or "
               "chrome://tracing)")
      .AddFlag("trace-steps", "K[-L]", "",
               "with --trace: record only the acts of step K (to step L), counted from 1, e.g. "
               "--trace-steps 100-101 (the plan's steps: its sources' and variables' pieces)")
      .AddFlag("stall-timeout", "DURATION", "10s",
               "fail the job when no actor acts for this long (e.g. 500ms, 10s, 2m)")
      .AddFlag("blas-threads", "N", "1", "OpenBLAS threads per GEMM")
      .AddFlag("output", "text|json", "text", "summary format")
      .AddFlag("fetch-dir", "DIR", "",
               "write every piece every sink kept to DIR/<sink>_<input>_<piece>.npy")
      .AddSwitch("verbose", "log INFO messages (default: warnings and errors only)");
  return spec;
}

absl::StatusOr<RunPlanOptions> RunPlanOptionsFrom(const cli::ParsedArguments& arguments) {
  RunPlanOptions options;
  options.plan_path = arguments.positionals().at(0);

  if (absl::Status status = ParseExecutionFlags(kCommand, arguments, &options); !status.ok()) {
    return status;
  }
  return options;
}

int RunPlan(const RunPlanOptions& options, std::ostream& out, std::ostream& error) {
  SetLogVerbosity(options.verbose);

  absl::StatusOr<plan::Plan> plan = ReadPlanFile(options.plan_path);
  if (!plan.ok()) {
    error << kCommand << ": " << plan.status().message() << "\n";
    return cli::kExitUsage;
  }
  if (absl::Status status = ValidatePlan(*plan); !status.ok()) {
    error << kCommand << ": invalid plan '" << options.plan_path << "': " << status.message()
          << "\n";
    return cli::kExitUsage;
  }

  // A plan that cannot finish a step is refused before anything is built; one the proof cannot
  // read (a node plan whose SEND peers are elsewhere) runs, with the stall detector as before.
  if (absl::Status proof = compiler::ProveStepCompletes({*plan});
      absl::IsFailedPrecondition(proof)) {
    error << kCommand << ": plan '" << options.plan_path << "' cannot finish: " << proof.message()
          << "\n";
    return cli::kExitUsage;
  } else if (!proof.ok()) {
    LOG(WARNING) << "cannot prove that plan '" << options.plan_path
                 << "' finishes: " << proof.message();
  }

  KernelRegistry kernels;
  if (absl::Status status = RegisterAllKernels(&kernels); !status.ok()) {
    error << kCommand << ": cannot register the kernels: " << status << "\n";
    return cli::kExitFailure;
  }
  SetBlasThreads(options.blas_threads);
  WarnIfBlasKernelsAreGeneric();

  // A local run opens the files its plan names anywhere: they are the user's own.
  const FileRoots files = FileRoots::Unrestricted();
  JobOptions job_options;
  job_options.files = &files;
  job_options.stall_timeout = options.stall_timeout;
  // Acts are recorded for the trace only: a long run would keep a record of every act.
  job_options.record_events = !options.trace_path.empty();
  if (options.trace_steps.has_value()) {
    if (absl::Status within = cli::CheckTraceStepsWithin(kCommand, *options.trace_steps, 1,
                                                         StepsOfPlan(*plan), "the plan");
        !within.ok()) {
      error << within.message() << "\n";
      return cli::kExitUsage;
    }
    job_options.recorded_steps = {options.trace_steps->first() - 1,
                                  options.trace_steps->last() - 1};
  }
  if (absl::Status status = SetUpDevices(*plan, &job_options); !status.ok()) {
    error << kCommand << ": " << status.message() << "\n";
    return cli::kExitFailure;
  }
  absl::StatusOr<std::unique_ptr<JobRuntime>> job =
      JobRuntime::Create(*plan, &kernels, MakeActorFactory(), job_options);
  if (!job.ok()) {
    error << kCommand << ": plan '" << options.plan_path
          << "' rejected before running: " << job.status() << "\n";
    return cli::kExitUsage;
  }

  LOG(INFO) << "running job '" << plan->job_name() << "' from " << options.plan_path << ": "
            << plan->tasks_size() << " tasks on " << plan->devices_size() << " devices";
  absl::Status status = (*job)->Run();
  int exit_code = status.ok() ? cli::kExitSuccess : cli::kExitFailure;
  if (!status.ok()) {
    error << kCommand << ": job '" << plan->job_name() << "' failed: " << status << "\n";
  }

  // A failed job's trace shows what happened up to the failure: write it either way.
  std::string trace_path;
  if (!options.trace_path.empty()) {
    if (absl::Status trace = WriteChromeTrace(**job, options.trace_path); trace.ok()) {
      trace_path = options.trace_path;
      LOG(INFO) << "wrote a Chrome trace of " << (*job)->events().size() << " acts to "
                << trace_path;
    } else {
      error << kCommand << ": " << trace.message() << "\n";
      exit_code = cli::kExitFailure;
    }
  }

  std::vector<std::string> fetched_files;
  if (!options.fetch_directory.empty() && status.ok()) {
    absl::StatusOr<std::vector<std::string>> written =
        WriteFetchedPieces(**job, options.fetch_directory);
    if (written.ok()) {
      fetched_files = std::move(*written);
      LOG(INFO) << "wrote " << fetched_files.size() << " .npy files to " << options.fetch_directory;
    } else {
      error << kCommand << ": " << written.status().message() << "\n";
      exit_code = cli::kExitFailure;
    }
  }

  if (options.output == OutputFormat::kJson) {
    out << FormatSummaryJson(**job, status, trace_path, fetched_files);
  } else {
    out << FormatSummaryText(**job);
    if (!trace_path.empty()) out << "trace: " << trace_path << "\n";
    if (!fetched_files.empty()) {
      out << "fetched: " << fetched_files.size() << " .npy files in " << options.fetch_directory
          << "\n";
    }
  }
  out.flush();
  return exit_code;
}

absl::StatusOr<std::vector<std::string>> WriteFetchedPieces(const JobRuntime& job,
                                                            const std::string& directory) {
  if (absl::Status status = CreateFetchDirectory(directory); !status.ok()) return status;
  std::vector<std::string> paths;
  // File name -> what it holds, to refuse two pieces landing on one file.
  absl::flat_hash_map<std::string, std::string> written;
  for (const plan::Task& task : job.plan().tasks()) {
    if (task.kind() != plan::SINK) continue;
    absl::StatusOr<const std::vector<std::vector<HostTensor>>*> pieces =
        FetchedPieces(job, task.name());
    if (!pieces.ok()) return pieces.status();
    for (size_t input = 0; input < (*pieces)->size(); ++input) {
      const std::string& register_name = task.inputs(static_cast<int>(input));
      const std::vector<HostTensor>& received = (**pieces)[input];
      for (size_t piece = 0; piece < received.size(); ++piece) {
        std::string file_name = absl::StrCat(FileNamePart(task.name()), "_",
                                             FileNamePart(register_name), "_", piece, ".npy");
        std::string what =
            absl::StrCat("sink '", task.name(), "' input '", register_name, "' piece ", piece);
        auto [existing, inserted] = written.emplace(file_name, what);
        if (!inserted) {
          return absl::FailedPreconditionError(
              absl::StrCat("both ", existing->second, " and ", what, " would be written to '",
                           file_name, "': rename a sink or register"));
        }
        std::string path = (std::filesystem::path(directory) / file_name).string();
        if (absl::Status status = WriteNpyFile(received[piece], path); !status.ok()) {
          return status;
        }
        paths.push_back(std::move(path));
      }
    }
  }
  return paths;
}

}  // namespace loom::loomctl
