#include "client/loomctl/run_command.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/local_run.h"
#include "client/loomctl/compile_command.h"
#include "client/loomctl/fetch_directory.h"
#include "client/loomctl/npy_writer.h"
#include "client/loomctl/parse_options_and_run.h"
#include "compiler/logical_graph.h"
#include "glog/logging.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_registry.h"
#include "runtime/chrome_trace.h"
#include "runtime/data_type.h"
#include "runtime/job_options.h"

namespace loom::loomctl {
namespace {

constexpr char kCommand[] = "loomctl run";

std::string FetchedTensorPath(const std::string& directory, const std::string& tensor,
                              size_t step) {
  return (std::filesystem::path(directory) /
          absl::StrCat(FileNamePart(tensor), "_step", step, ".npy"))
      .string();
}

size_t StepCount(const FetchedTensors& fetched) {
  size_t steps = 0;
  for (const auto& [name, tensors] : fetched) steps = std::max(steps, tensors.size());
  return steps;
}

// The running sums of ComputeStatistics.
struct RunningStatistics {
  double sum = 0;
  double max_abs = 0;
  bool saw_nan = false;
};

// Reads `count` elements of type T from `bytes` and folds them into `statistics`.
template <typename T, typename Convert>
void Accumulate(const std::vector<std::byte>& bytes, int64_t count, Convert convert,
                RunningStatistics* statistics) {
  for (int64_t i = 0; i < count; ++i) {
    T raw;
    std::memcpy(&raw, bytes.data() + i * sizeof(T), sizeof(T));
    double value = convert(raw);
    if (std::isnan(value)) statistics->saw_nan = true;
    statistics->sum += value;
    statistics->max_abs = std::max(statistics->max_abs, std::fabs(value));
  }
}

// Accumulate for a type whose values convert to double as they are.
template <typename T>
void AccumulateNumbers(const std::vector<std::byte>& bytes, int64_t count,
                       RunningStatistics* statistics) {
  Accumulate<T>(
      bytes, count, [](T x) { return static_cast<double>(x); }, statistics);
}

// The value of a bfloat16: its bits are the upper half of a float32's.
double BFloat16ToDouble(uint16_t bits) {
  uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof(value));
  return static_cast<double>(value);
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
  return ParseOptionsAndRun(RunArgumentSpec(), arguments, RunOptionsFrom, RunJob, out, error);
}

}  // namespace

Subcommand RunSubcommand() {
  return Subcommand{"run",
                    "compile a job and run it on this machine; print the fetched tensors per step",
                    RunFromArguments};
}

ArgumentSpec RunArgumentSpec() {
  ArgumentSpec spec(
      kCommand,
      "Compiles a job for --devices (as 'loomctl compile' does) and runs the whole plan in this\n"
      "process with the CPU kernels. Prints, per step, every fetched logical tensor's data type,\n"
      "shape, mean and largest magnitude, then the makespan, the acts and every device's peak\n"
      "memory. A job placed on devices outside --devices is re-placed as 'loomctl compile' does\n"
      "(see 'loomctl compile --help').\n\n"
      "Exit codes: 0 the job succeeded; 1 the job failed (its error names the culprit) or its\n"
      "results could not be written; 2 usage error, or the job cannot be read or does not\n"
      "compile.");
  spec.AddPositional("JOB", "the job: protobuf text format (.pbtxt) or binary (.pb)")
      .AddFlag("devices", "cpu:N", "",
               "run on N CPU devices (required; cuda:N is not supported yet)")
      .AddFlag("steps", "S", "", "run S steps (default: the job's num_steps)")
      .AddFlag("fetch-dir", "DIR", "",
               "write every fetched logical tensor of every step to DIR/<tensor>_step<k>.npy")
      .AddFlag("trace", "PATH", "",
               "write a Chrome trace of every act to PATH when the job succeeds (open in "
               "ui.perfetto.dev or chrome://tracing)")
      .AddFlag("output", "text|json", "text",
               "output format; json: one object per step and line, then the summary")
      .AddFlag("stall-timeout", "DURATION", "10s",
               "fail the job when no actor acts for this long (e.g. 500ms, 10s, 2m)")
      .AddFlag("blas-threads", "N", "1", "OpenBLAS threads per GEMM")
      .AddSwitch("actors", "also print the per-actor table of 'loomctl run-plan'")
      .AddSwitch("verbose", "log INFO messages (default: warnings and errors only)");
  return spec;
}

absl::StatusOr<RunOptions> RunOptionsFrom(const ParsedArguments& arguments) {
  RunOptions options;
  options.job_path = arguments.positionals().at(0);
  options.actors = arguments.Switch("actors");

  if (!arguments.Has("devices")) {
    return UsageError(kCommand,
                      "--devices is required: the devices to run on, e.g. --devices cpu:4");
  }
  absl::StatusOr<int> cpus = ParseCpuDevices(kCommand, arguments.Value("devices"));
  if (!cpus.ok()) return cpus.status();
  options.cpus = *cpus;

  if (arguments.Has("steps")) {
    std::string steps = arguments.Value("steps");
    if (!absl::SimpleAtoi(steps, &options.steps) || options.steps < 1) {
      return UsageError(kCommand,
                        absl::StrCat("--steps must be a whole number >= 1, not '", steps, "'"));
    }
  }
  if (absl::Status status = ParseExecutionFlags(kCommand, arguments, &options); !status.ok()) {
    return status;
  }
  return options;
}

absl::StatusOr<TensorStatistics> ComputeStatistics(const HostTensor& tensor) {
  TensorStatistics statistics;
  statistics.elements = tensor.shape.NumElements();
  size_t element_size = 0;
  switch (tensor.data_type) {
    case plan::FLOAT32:
    case plan::INT32:
      element_size = 4;
      break;
    case plan::INT64:
      element_size = 8;
      break;
    case plan::UINT8:
      element_size = 1;
      break;
    case plan::UINT16:
    case plan::BFLOAT16:
      element_size = 2;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("a tensor of data type ", plan::DataType_Name(tensor.data_type)));
  }
  if (tensor.bytes.size() != static_cast<size_t>(statistics.elements) * element_size) {
    return absl::InvalidArgumentError(absl::StrCat("a ", DataTypeName(tensor.data_type),
                                                   " tensor of shape ", tensor.shape.ToString(),
                                                   " holds ", tensor.bytes.size(), " bytes"));
  }
  if (statistics.elements == 0) {
    statistics.mean = statistics.max_abs = std::numeric_limits<double>::quiet_NaN();
    return statistics;
  }
  RunningStatistics running;
  const int64_t count = statistics.elements;
  switch (tensor.data_type) {
    case plan::FLOAT32:
      AccumulateNumbers<float>(tensor.bytes, count, &running);
      break;
    case plan::INT32:
      AccumulateNumbers<int32_t>(tensor.bytes, count, &running);
      break;
    case plan::INT64:
      AccumulateNumbers<int64_t>(tensor.bytes, count, &running);
      break;
    case plan::UINT8:
      AccumulateNumbers<uint8_t>(tensor.bytes, count, &running);
      break;
    case plan::UINT16:
      AccumulateNumbers<uint16_t>(tensor.bytes, count, &running);
      break;
    case plan::BFLOAT16:
      Accumulate<uint16_t>(tensor.bytes, count, BFloat16ToDouble, &running);
      break;
    default:
      break;
  }
  statistics.mean = running.sum / static_cast<double>(count);
  statistics.max_abs = running.saw_nan ? std::numeric_limits<double>::quiet_NaN() : running.max_abs;
  return statistics;
}

absl::StatusOr<std::vector<std::string>> WriteFetchedTensors(const FetchedTensors& fetched,
                                                             const std::string& directory) {
  if (absl::Status status = CreateFetchDirectory(directory); !status.ok()) return status;
  // File name part -> the tensor it holds, to refuse two tensors landing on one file.
  absl::flat_hash_map<std::string, std::string> file_names;
  for (const auto& [name, tensors] : fetched) {
    auto [existing, inserted] = file_names.emplace(FileNamePart(name), name);
    if (!inserted) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the fetched tensors '", existing->second, "' and '", name,
          "' would be written to the same files ", FileNamePart(name), "_step<k>.npy: rename one"));
    }
  }
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

int RunJob(const RunOptions& options, std::ostream& out, std::ostream& error) {
  SetLogVerbosity(options.verbose);
  const bool json = options.output == OutputFormat::kJson;

  compiler::DeviceSet devices = compiler::DeviceSet::Cpus(options.cpus, 1);
  std::string note;
  absl::StatusOr<std::unique_ptr<CompiledJob>> compiled =
      ReadAndCompileJob(options.job_path, devices, options.steps, &note);
  if (!note.empty()) error << kCommand << ": note: " << note << "\n";
  if (!compiled.ok()) {
    error << kCommand << ": " << options.job_path << ": " << compiled.status().message() << "\n";
    return kExitUsage;
  }
  const plan::Plan& plan = (*compiled)->result.plan;

  KernelRegistry kernels;
  if (absl::Status status = RegisterCpuKernels(&kernels); !status.ok()) {
    error << kCommand << ": cannot register the CPU kernels: " << status << "\n";
    return kExitFailure;
  }
  SetBlasThreads(options.blas_threads);

  JobOptions job_options;
  job_options.stall_timeout = options.stall_timeout;
  LOG(INFO) << "running job '" << plan.job_name() << "' from " << options.job_path << ": "
            << plan.tasks_size() << " tasks on " << plan.devices_size() << " devices";
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(plan, kernels, job_options);
  if (!run.ok()) {
    error << kCommand << ": job '" << plan.job_name() << "' failed: " << run.status() << "\n";
    if (!options.trace_path.empty()) {
      error << kCommand << ": no trace written: a failed local run keeps no runtime to trace\n";
    }
    if (json) {
      out << "{\"job_name\":" << JsonString(plan.job_name()) << ",\"status\":\"failed\""
          << ",\"error\":" << JsonString(run.status().ToString()) << "}\n";
    }
    out.flush();
    return kExitFailure;
  }
  const JobRuntime& job = *run->runtime;

  int exit_code = kExitSuccess;
  std::string trace_path;
  if (!options.trace_path.empty()) {
    if (absl::Status trace = WriteChromeTrace(job, options.trace_path); trace.ok()) {
      trace_path = options.trace_path;
      LOG(INFO) << "wrote a Chrome trace of " << job.events().size() << " acts to " << trace_path;
    } else {
      error << kCommand << ": " << trace.message() << "\n";
      exit_code = kExitFailure;
    }
  }

  std::vector<std::string> fetched_files;
  if (!options.fetch_directory.empty()) {
    absl::StatusOr<std::vector<std::string>> written =
        WriteFetchedTensors(run->fetched, options.fetch_directory);
    if (written.ok()) {
      fetched_files = std::move(*written);
      LOG(INFO) << "wrote " << fetched_files.size() << " .npy files to " << options.fetch_directory;
    } else {
      error << kCommand << ": " << written.status().message() << "\n";
      exit_code = kExitFailure;
    }
  }

  absl::StatusOr<std::string> steps =
      json ? FormatStepsJson(run->fetched, fetched_files.empty() ? "" : options.fetch_directory)
           : FormatStepsText(run->fetched);
  if (!steps.ok()) {
    error << kCommand << ": " << steps.status().message() << "\n";
    exit_code = kExitFailure;
  } else {
    out << *steps;
  }
  if (json) {
    out << FormatSummaryJson(job, absl::OkStatus(), trace_path, fetched_files,
                             JsonLayout::kOneLine);
  } else {
    out << "\n";
    if (options.actors) out << FormatActorTable(job) << "\n";
    out << FormatSummaryFooter(job);
    if (!trace_path.empty()) out << "trace: " << trace_path << "\n";
    if (!fetched_files.empty()) {
      out << "fetched: " << fetched_files.size() << " .npy files in " << options.fetch_directory
          << "\n";
    }
  }
  out.flush();
  return exit_code;
}

}  // namespace loom::loomctl
