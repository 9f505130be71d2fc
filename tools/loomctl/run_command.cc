#include "tools/loomctl/run_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "cli/parse_options_and_run.h"
#include "cli/step_range.h"
#include "client/initial_state.h"
#include "compiler/logical_graph.h"
#include "core/data_type.h"
#include "core/json_string.h"
#include "core/plan_steps.h"
#include "core/safetensors.h"
#include "glog/logging.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/kernel_registry.h"
#include "node/checkpoint_assembly.h"
#include "node/device_backends.h"
#include "node/local_run.h"
#include "node/tensor_statistics.h"
#include "runtime/chrome_trace.h"
#include "runtime/job_options.h"
#include "tools/loomctl/checkpoint_directory.h"
#include "tools/loomctl/compile_command.h"
#include "tools/loomctl/fetch_directory.h"
#include "tools/loomctl/fetch_writer.h"
#include "tools/loomctl/npy_writer.h"
#include "tools/loomctl/step_reporter.h"

namespace loom::loomctl {
namespace {

constexpr char kCommand[] = "loomctl run";

size_t StepCount(const FetchedTensors& fetched) {
  size_t steps = 0;
  for (const auto& [name, tensors] : fetched) steps = std::max(steps, tensors.size());
  return steps;
}

std::string FormatNumber(double value) { return absl::StrFormat("%.6g", value); }

std::string JsonNumber(double value) {
  return std::isfinite(value) ? absl::StrFormat("%.9g", value) : std::string("null");
}

std::string JsonShape(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape.dimensions(), ","), "]");
}

int RunFromArguments(const std::vector<std::string>& arguments, std::ostream& out,
                     std::ostream& error) {
  return cli::ParseOptionsAndRun(RunArgumentSpec(), arguments, RunOptionsFrom, RunJob, out, error);
}

}  // namespace

cli::Subcommand RunSubcommand() {
  return cli::Subcommand{
      "run", "compile a job and run it on this machine; print the fetched tensors per step",
      RunFromArguments};
}

cli::ArgumentSpec RunArgumentSpec() {
  cli::ArgumentSpec spec(
      kCommand,
      "Compiles a job for --devices (as 'loomctl compile' does) and runs the whole plan in this\n"
      "process with the CPU kernels. Prints, per step, every fetched logical tensor's data type,\n"
      "shape, mean and largest magnitude, then the makespan, the acts and every device's peak\n"
      "memory. A job placed on devices outside --devices is re-placed as 'loomctl compile' does\n"
      "(see 'loomctl compile --help').\n\n"
      "A training job (one with a loss) prints instead one line per step as it finishes: step,\n"
      "loss (the mean over the step's micro-batches), step time and tokens/s (with --output json\n"
      "one object per step), with a progress bar on stderr when it is a terminal. --init starts\n"
      "from a checkpoint; --save-dir writes DIR/step-<k>.safetensors, the state after k steps.\n\n"
      "Exit codes: 0 the job succeeded; 1 the job failed (its error names the culprit) or its\n"
      "results could not be written; 2 usage error, or the job cannot be read or does not\n"
      "compile.");
  spec.AddPositional("JOB", "the job: protobuf text format (.pbtxt) or binary (.pb)")
      .AddFlag("devices", "SPEC", "",
               "run on these devices (required): cpu:N, cuda:all or cuda:I[,J...]")
      .AddFlag("steps", "S", "",
               "run S steps (default: the job's num_steps); after --init they follow the "
               "checkpoint's steps")
      .AddFlag("fetch-dir", "DIR", "",
               "write every fetched logical tensor of every step to DIR/<tensor>_step<k>.npy (k: "
               "the piece, one per micro-batch; a training run writes each as it is computed, "
               "other runs at the end)")
      .AddFlag("trace", "PATH", "",
               "write a Chrome trace of every act to PATH when the job succeeds (open in "
               "ui.perfetto.dev or chrome://tracing)")
      .AddFlag("trace-steps", "K[-L]", "",
               "with --trace: record only the acts of step K (to step L), as the step lines "
               "count them, e.g. --trace-steps 100-101")
      .AddFlag("output", "text|json", "text",
               "output format; json: one object per step and line, then the summary")
      .AddFlag("init", "PATH", "",
               "start from the safetensors checkpoint PATH: every variable by name, and the "
               "optimizer state when it holds one (then the run continues at step "
               "optimizer.step)")
      .AddFlag("save-dir", "DIR", "",
               "write checkpoints DIR/step-<k>.safetensors (every --save-every steps and at the "
               "end) and DIR/latest.safetensors, a link to the last")
      .AddFlag("save-every", "K", "0",
               "with --save-dir, also checkpoint every K steps (0: only at the end)")
      .AddFlag("stall-timeout", "DURATION", "10s",
               "fail the job when no actor acts for this long (e.g. 500ms, 10s, 2m)")
      .AddFlag("blas-threads", "N", "1", "OpenBLAS threads per GEMM")
      .AddSwitch("actors", "also print the per-actor table of 'loomctl run-plan'")
      .AddSwitch("verbose", "log INFO messages (default: warnings and errors only)");
  return spec;
}

absl::StatusOr<RunOptions> RunOptionsFrom(const cli::ParsedArguments& arguments) {
  RunOptions options;
  options.job_path = arguments.positionals().at(0);
  options.actors = arguments.Switch("actors");

  if (!arguments.Has("devices")) {
    return cli::UsageError(kCommand,
                           "--devices is required: the devices to run on, e.g. --devices cpu:4");
  }
  absl::StatusOr<cli::DeviceSpec> devices =
      cli::ParseDeviceSpec(kCommand, arguments.Value("devices"), CudaDeviceCount);
  if (!devices.ok()) return devices.status();
  options.devices = *std::move(devices);

  if (arguments.Has("steps")) {
    std::string steps = arguments.Value("steps");
    if (!absl::SimpleAtoi(steps, &options.steps) || options.steps < 1) {
      return cli::UsageError(
          kCommand, absl::StrCat("--steps must be a whole number >= 1, not '", steps, "'"));
    }
  }
  if (absl::Status status = ParseExecutionFlags(kCommand, arguments, &options); !status.ok()) {
    return status;
  }
  if (arguments.Has("init")) {
    options.init_path = arguments.Value("init");
    if (options.init_path.empty())
      return cli::UsageError(kCommand, "--init needs a checkpoint path");
  }
  if (arguments.Has("save-dir")) {
    options.save_directory = arguments.Value("save-dir");
    if (options.save_directory.empty())
      return cli::UsageError(kCommand, "--save-dir needs a directory");
  }
  if (arguments.Has("save-every")) {
    std::string every = arguments.Value("save-every");
    if (!absl::SimpleAtoi(every, &options.save_every) || options.save_every < 0) {
      return cli::UsageError(
          kCommand, absl::StrCat("--save-every must be a whole number >= 0, not '", every, "'"));
    }
    if (options.save_every > 0 && options.save_directory.empty()) {
      return cli::UsageError(kCommand,
                             "--save-every needs --save-dir: where to write the checkpoints");
    }
  }
  return options;
}

absl::StatusOr<std::vector<std::string>> WriteFetchedTensors(const FetchedTensors& fetched,
                                                             const std::string& directory) {
  if (absl::Status status = CreateFetchDirectory(directory); !status.ok()) return status;
  std::vector<std::string> names;
  for (const auto& [name, tensors] : fetched) names.push_back(name);
  if (absl::Status status = CheckFetchedFileNames(names); !status.ok()) return status;
  std::vector<std::string> paths;
  const size_t steps = StepCount(fetched);
  for (size_t step = 0; step < steps; ++step) {
    for (const auto& [name, tensors] : fetched) {
      if (step >= tensors.size()) continue;
      std::string path = FetchedTensorPath(directory, name, step);
      if (absl::Status status = WriteNpyFile(tensors[step], path); !status.ok()) return status;
      paths.push_back(std::move(path));
    }
  }
  return paths;
}

absl::StatusOr<std::string> FormatStepsText(const FetchedTensors& fetched) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"step", "tensor", "type", "shape", "mean", "max |x|"});
  const size_t steps = StepCount(fetched);
  for (size_t step = 0; step < steps; ++step) {
    for (const auto& [name, tensors] : fetched) {
      if (step >= tensors.size()) continue;
      const HostTensor& tensor = tensors[step];
      absl::StatusOr<TensorStatistics> statistics = ComputeStatistics(tensor);
      if (!statistics.ok()) {
        return absl::Status(statistics.status().code(),
                            absl::StrCat("fetched tensor '", name, "' of step ", step, ": ",
                                         statistics.status().message()));
      }
      rows.push_back({absl::StrCat(step), name, DataTypeName(tensor.data_type),
                      tensor.shape.ToString(), FormatNumber(statistics->mean),
                      FormatNumber(statistics->max_abs)});
    }
  }
  if (rows.size() == 1) return std::string("the job fetches nothing\n");
  return FormatTable(rows, 4);
}

absl::StatusOr<std::string> FormatStepsJson(const FetchedTensors& fetched,
                                            const std::string& fetch_directory) {
  std::string json;
  const size_t steps = StepCount(fetched);
  for (size_t step = 0; step < steps; ++step) {
    absl::StrAppend(&json, "{\"step\":", step, ",\"tensors\":{");
    bool first = true;
    for (const auto& [name, tensors] : fetched) {
      if (step >= tensors.size()) continue;
      const HostTensor& tensor = tensors[step];
      absl::StatusOr<TensorStatistics> statistics = ComputeStatistics(tensor);
      if (!statistics.ok()) {
        return absl::Status(statistics.status().code(),
                            absl::StrCat("fetched tensor '", name, "' of step ", step, ": ",
                                         statistics.status().message()));
      }
      absl::StrAppend(&json, first ? "" : ",", JsonString(name),
                      ":{\"data_type\":", JsonString(DataTypeName(tensor.data_type)),
                      ",\"shape\":", JsonShape(tensor.shape),
                      ",\"mean\":", JsonNumber(statistics->mean),
                      ",\"max_abs\":", JsonNumber(statistics->max_abs));
      if (!fetch_directory.empty()) {
        absl::StrAppend(&json,
                        ",\"file\":", JsonString(FetchedTensorPath(fetch_directory, name, step)));
      }
      json += "}";
      first = false;
    }
    json += "}}\n";
  }
  return json;
}

namespace {

// The per-step lines of a training job, with a progress bar when `error` is a terminal.
std::unique_ptr<StepReporter> MakeStepReporter(const job::Job& job, int64_t last_step, bool json,
                                               std::ostream& out, std::ostream& error) {
  StepReporter::Options reporter_options;
  reporter_options.last_step = last_step;
  reporter_options.tokens_per_step = TokensPerStep(job);
  reporter_options.json = json;
  reporter_options.out = &out;
  // The bar is for a person watching a terminal: never into a captured stream.
  if (&error == &std::cerr && isatty(STDERR_FILENO)) reporter_options.progress = &error;
  return std::make_unique<StepReporter>(std::move(reporter_options));
}

// Writes the state after `steps_taken` steps to `directory` and says so on `out`; the path.
absl::StatusOr<std::string> SaveSegmentCheckpoint(const job::Job& job, const plan::Plan& plan,
                                                  const JobRuntime& runtime, int64_t steps_taken,
                                                  const std::string& directory, bool json,
                                                  std::ostream& out) {
  absl::StatusOr<std::string> path = SaveCheckpoint(
      plan, runtime, JobCheckpointProgress(job, plan.job_name(), steps_taken), directory);
  if (!path.ok()) return path.status();
  LOG(INFO) << "wrote the checkpoint of step " << steps_taken << " to " << *path;
  if (json) {
    out << "{\"checkpoint\":" << JsonString(*path) << ",\"step\":" << steps_taken << "}\n";
  } else {
    out << "checkpoint: " << *path << "\n";
  }
  out.flush();
  return path;
}

// The Chrome trace of a run: the acts of each checkpoint segment it records, on one time axis
// (each segment's times offset by its start after the first traced segment's) and with the run's
// step numbers.
struct RunTrace {
  std::vector<std::string> event_lists;
  int64_t acts = 0;
  std::optional<std::chrono::steady_clock::time_point> origin;

  // `steps_before`: the steps before the segment's first, as the step lines count them.
  void Add(const JobRuntime& segment, int64_t steps_before) {
    if (!origin.has_value()) origin = segment.start_time();
    TraceOffsets offsets;
    offsets.nanoseconds =
        std::chrono::duration_cast<std::chrono::nanoseconds>(segment.start_time() - *origin)
            .count();
    offsets.steps = steps_before;
    event_lists.push_back(ChromeTraceEvents(segment, offsets));
    acts += static_cast<int64_t>(segment.events().size());
  }
};

// What the segment running the run's steps [done, done + length) (from 0, after the initial
// state's `first_step`) records for the trace: nothing without --trace or when --trace-steps
// (counted as the step lines count them) holds none of its steps.
std::optional<RecordedSteps> SegmentTraceSteps(const RunOptions& options, int64_t first_step,
                                               int64_t done, int64_t length) {
  if (options.trace_path.empty()) return std::nullopt;
  if (!options.trace_steps.has_value()) return RecordedSteps{};
  const int64_t first = options.trace_steps->first() - 1 - first_step - done;
  const int64_t last = options.trace_steps->last() - 1 - first_step - done;
  if (last < 0 || first >= length) return std::nullopt;
  return RecordedSteps{std::max<int64_t>(first, 0), std::min(last, length - 1)};
}

// After the last segment: the latest-checkpoint link, the trace, the fetched tensors' files, the
// steps of a job that does not train, and the summary. Returns the exit code.
// `written_files`: what a training run's FetchWriter wrote (a run without one writes `fetched`
// to --fetch-dir here).
int PrintResults(const RunOptions& options, bool training, const FetchedTensors& fetched,
                 std::vector<std::string> written_files, const JobRuntime& job_runtime,
                 const RunTrace& trace, const std::string& last_checkpoint, std::ostream& out,
                 std::ostream& error) {
  const bool json = options.output == OutputFormat::kJson;

  int exit_code = cli::kExitSuccess;
  if (!last_checkpoint.empty()) {
    if (absl::Status status = PointLatestCheckpoint(options.save_directory, last_checkpoint);
        !status.ok()) {
      error << kCommand << ": --save-dir: " << status.message() << "\n";
      exit_code = cli::kExitFailure;
    }
  }
  std::string trace_path;
  if (!options.trace_path.empty()) {
    if (absl::Status written = WriteChromeTraceFile(
            ChromeTraceDocument(job_runtime.plan().job_name(), trace.event_lists),
            options.trace_path);
        written.ok()) {
      trace_path = options.trace_path;
      LOG(INFO) << "wrote a Chrome trace of " << trace.acts << " acts to " << trace_path;
    } else {
      error << kCommand << ": " << written.message() << "\n";
      exit_code = cli::kExitFailure;
    }
  }

  std::vector<std::string> fetched_files = std::move(written_files);
  if (!options.fetch_directory.empty() && !training) {
    absl::StatusOr<std::vector<std::string>> written =
        WriteFetchedTensors(fetched, options.fetch_directory);
    if (written.ok()) {
      fetched_files = std::move(*written);
      LOG(INFO) << "wrote " << fetched_files.size() << " .npy files to " << options.fetch_directory;
    } else {
      error << kCommand << ": " << written.status().message() << "\n";
      exit_code = cli::kExitFailure;
    }
  }

  // Training jobs printed their steps as they finished.
  if (!training) {
    absl::StatusOr<std::string> step_lines =
        json ? FormatStepsJson(fetched, fetched_files.empty() ? "" : options.fetch_directory)
             : FormatStepsText(fetched);
    if (!step_lines.ok()) {
      error << kCommand << ": " << step_lines.status().message() << "\n";
      exit_code = cli::kExitFailure;
    } else {
      out << *step_lines;
    }
  }
  if (json) {
    out << FormatSummaryJson(job_runtime, absl::OkStatus(), trace_path, fetched_files,
                             JsonLayout::kOneLine);
  } else {
    out << "\n";
    if (options.actors) out << FormatActorTable(job_runtime) << "\n";
    out << FormatSummaryFooter(job_runtime);
    if (!trace_path.empty()) out << "trace: " << trace_path << "\n";
    if (!fetched_files.empty()) {
      out << "fetched: " << fetched_files.size() << " .npy files in " << options.fetch_directory
          << "\n";
    }
  }
  out.flush();
  return exit_code;
}

}  // namespace

int RunJob(const RunOptions& options, std::ostream& out, std::ostream& error) {
  SetLogVerbosity(options.verbose);
  const bool json = options.output == OutputFormat::kJson;

  compiler::DeviceSet devices = options.devices.Spread(1);
  std::string note;
  absl::StatusOr<job::Job> job =
      compiler::ReadJobForDevices(options.job_path, devices, options.steps, &note);
  if (!note.empty()) error << kCommand << ": note: " << note << "\n";
  if (!job.ok()) {
    error << kCommand << ": " << options.job_path << ": " << job.status().message() << "\n";
    return cli::kExitUsage;
  }
  const bool training = !job->loss().empty();
  if (training &&
      std::find(job->fetch().begin(), job->fetch().end(), job->loss()) == job->fetch().end()) {
    job->add_fetch(job->loss());
  }
  const bool has_optimizer = job->optimizer().kind_case() != job::Optimizer::KIND_NOT_SET;
  const int64_t steps = std::max<int64_t>(job->num_steps(), 1);

  // --init: check the file against the job before compiling anything.
  CheckpointTensors initial;
  if (!options.init_path.empty()) {
    absl::StatusOr<CheckpointTensors> read = StartFromCheckpoint(options.init_path, &*job);
    if (!read.ok()) {
      error << kCommand << ": --init: " << read.status().message() << "\n";
      return cli::kExitUsage;
    }
    initial = *std::move(read);
  }
  const int64_t first_step = job->initial_state().first_step();
  if (options.trace_steps.has_value()) {
    if (absl::Status within = cli::CheckTraceStepsWithin(
            kCommand, *options.trace_steps, first_step + 1, first_step + steps, "the run");
        !within.ok()) {
      error << within.message() << "\n";
      return cli::kExitUsage;
    }
  }

  if (!options.save_directory.empty()) {
    std::error_code error_code;
    std::filesystem::create_directories(options.save_directory, error_code);
    if (error_code) {
      error << kCommand << ": cannot create the checkpoint directory '" << options.save_directory
            << "': " << error_code.message() << "\n";
      return cli::kExitFailure;
    }
  }

  KernelRegistry kernels;
  if (absl::Status status = RegisterAllKernels(&kernels); !status.ok()) {
    error << kCommand << ": cannot register the kernels: " << status << "\n";
    return cli::kExitFailure;
  }
  SetBlasThreads(options.blas_threads);
  WarnIfBlasKernelsAreGeneric();

  std::unique_ptr<StepReporter> reporter;
  if (training) reporter = MakeStepReporter(*job, first_step + steps, json, out, error);
  // A training run writes its fetches as they come; other runs print them at the end.
  std::unique_ptr<FetchWriter> writer;
  if (training && !options.fetch_directory.empty()) {
    absl::StatusOr<std::unique_ptr<FetchWriter>> created =
        FetchWriter::Create(options.fetch_directory);
    if (!created.ok()) {
      error << kCommand << ": --fetch-dir: " << created.status().message() << "\n";
      return cli::kExitFailure;
    }
    writer = std::move(*created);
  }

  // Segments of --save-every steps (one segment without it), each starting from the checkpoint
  // the previous one wrote.
  const int64_t segment_steps =
      options.save_every > 0 ? std::min(options.save_every, steps) : steps;
  FetchedTensors fetched;
  RunTrace trace;
  std::unique_ptr<compiler::CompiledJob> compiled;
  LocalRunResult run;
  std::string last_checkpoint;
  for (int64_t done = 0; done < steps;) {
    const int64_t length = std::min(segment_steps, steps - done);
    job::Job segment = *job;
    segment.set_num_steps(length);
    if (done > 0) {
      job::InitialState* state = segment.mutable_initial_state();
      state->set_path(last_checkpoint);
      state->set_optimizer_state(has_optimizer);
      state->set_first_step(first_step + done);
    }
    absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> compiled_segment =
        compiler::CompileJobWithStandardOps(std::move(segment), devices,
                                            ProgressTo(error, kCommand, options.job_path));
    if (!compiled_segment.ok()) {
      error << kCommand << ": " << options.job_path << ": " << compiled_segment.status().message()
            << "\n";
      return cli::kExitUsage;
    }
    compiled = std::move(*compiled_segment);
    const plan::Plan& plan = compiled->result.plan;
    if (done == 0 && job->initial_state().optimizer_state()) {
      if (absl::Status status = CheckOptimizerStates(options.init_path, initial, *job, plan);
          !status.ok()) {
        error << kCommand << ": --init: " << status.message() << "\n";
        return cli::kExitUsage;
      }
    }
    if (!options.save_directory.empty() && job->variables_size() > 0 &&
        plan.variables_size() == 0) {
      error << kCommand << ": --save-dir: the compiled plan of job '" << plan.job_name()
            << "' does not say where its variables live (Plan.variables), so they cannot be "
               "saved\n";
      return cli::kExitFailure;
    }

    JobOptions job_options;
    job_options.stall_timeout = options.stall_timeout;
    // Acts are recorded for the trace only: a long run would keep a record of every act.
    const std::optional<RecordedSteps> traced =
        SegmentTraceSteps(options, first_step, done, length);
    job_options.record_events = traced.has_value();
    if (traced.has_value()) job_options.recorded_steps = *traced;
    // A training run prints its steps and writes its fetches from the sinks' callback, so its
    // memory does not grow with its steps (and the sinks nobody reads copy nothing).
    job_options.keep_sink_pieces = !training;
    if (absl::Status status = SetUpDevices(plan, &job_options); !status.ok()) {
      error << kCommand << ": " << status.message() << "\n";
      return cli::kExitFailure;
    }
    if (reporter != nullptr) {
      absl::StatusOr<StepFetches> step_fetches = StepFetchesOf(plan, job->loss());
      absl::Status status =
          step_fetches.ok()
              ? reporter->BeginSegment(*step_fetches, plan.num_micro_batches(), first_step + done)
              : step_fetches.status();
      if (!status.ok()) {
        error << kCommand << ": " << options.job_path << ": " << status.message() << "\n";
        return cli::kExitUsage;
      }
      std::vector<std::string> reported = reporter->sinks();
      if (writer != nullptr) {
        if (absl::Status begun = writer->BeginSegment(plan); !begun.ok()) {
          error << kCommand << ": --fetch-dir: " << begun.message() << "\n";
          return cli::kExitFailure;
        }
        const std::vector<std::string> written = writer->sinks();
        reported.insert(reported.end(), written.begin(), written.end());
      }
      job_options.reported_sinks.emplace(reported.begin(), reported.end());
      job_options.sink_piece_callback = [reporter = reporter.get(),
                                         writer = writer.get()](const SinkPiece& piece) {
        if (absl::Status status = reporter->OnPiece(piece); !status.ok()) return status;
        return writer != nullptr ? writer->OnPiece(piece) : absl::OkStatus();
      };
    }
    LOG(INFO) << "running job '" << plan.job_name() << "' from " << options.job_path << ": "
              << plan.tasks_size() << " tasks on " << plan.devices_size() << " devices, steps "
              << first_step + done + 1 << " to " << first_step + done + length;
    absl::StatusOr<LocalRunResult> segment_run = RunPlanLocally(plan, kernels, job_options);
    absl::Status status = segment_run.status();
    if (status.ok() && reporter != nullptr) status = reporter->EndSegment(length);
    if (status.ok() && writer != nullptr) status = writer->EndSegment();
    if (!status.ok()) {
      error << kCommand << ": job '" << plan.job_name() << "' failed: " << status << "\n";
      if (!options.trace_path.empty()) {
        error << kCommand << ": no trace written: a failed local run keeps no runtime to trace\n";
      }
      if (json) {
        out << "{\"job_name\":" << JsonString(plan.job_name()) << ",\"status\":\"failed\""
            << ",\"error\":" << JsonString(status.ToString()) << "}\n";
      }
      out.flush();
      return cli::kExitFailure;
    }
    run = std::move(*segment_run);
    if (traced.has_value()) trace.Add(*run.runtime, first_step + done);
    for (auto& [name, tensors] : run.fetched) {
      std::vector<HostTensor>& all = fetched[name];
      for (HostTensor& tensor : tensors) all.push_back(std::move(tensor));
    }
    run.fetched.clear();
    done += length;

    if (!options.save_directory.empty()) {
      absl::StatusOr<std::string> path = SaveSegmentCheckpoint(
          *job, plan, *run.runtime, first_step + done, options.save_directory, json, out);
      if (!path.ok()) {
        error << kCommand << ": --save-dir: " << path.status().message() << "\n";
        return cli::kExitFailure;
      }
      last_checkpoint = *path;
    }
  }
  return PrintResults(options, training, fetched,
                      writer != nullptr ? writer->paths() : std::vector<std::string>(),
                      *run.runtime, trace, last_checkpoint, out, error);
}

}  // namespace loom::loomctl
