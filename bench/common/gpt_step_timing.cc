#include "bench/common/gpt_step_timing.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "compiler/compiler.h"
#include "node/device_backends.h"
#include "node/local_run.h"

namespace loom::bench {

std::vector<double> GptStepMilliseconds(const gpt::GptConfig& config, int warmup_steps,
                                        const KernelRegistry& kernels,
                                        const compiler::DeviceSet& devices) {
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  ExitIfError(job.status(), "building the GPT job");
  compiler::OpRegistry ops;
  ExitIfError(compiler::RegisterStandardOps(&ops), "registering the ops");
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(
      *job, ops,
      devices.devices.empty()
          ? compiler::DeviceSet::Cpus(static_cast<int>(gpt::GptDeviceCount(config)), 1)
          : devices);
  ExitIfError(compiled.status(), "compiling the GPT job");
  JobOptions options;
  ExitIfError(SetUpDevices(compiled->plan, &options), "setting up the devices");
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(compiled->plan, kernels, std::move(options));
  ExitIfError(run.status(), "running the GPT job");
  // The end of a loss sink's act, by piece (with micro-batches, a step's last piece).
  const int micro_batches = std::max<int>(compiled->plan.num_micro_batches(), 1);
  uint32_t sink_index = 0;
  bool found = false;
  for (const plan::Task& task : compiled->plan.tasks()) {
    if (!found && task.kind() == plan::SINK && task.inputs(0).rfind("loss", 0) == 0) {
      sink_index = task.index();
      found = true;
    }
  }
  if (!found) ExitIfError(absl::InternalError("the job has no sink of the loss"), "timing");
  std::vector<int64_t> ends(config.steps, 0);
  for (const ActEvent& event : run->runtime->events()) {
    if (event.task_index != sink_index) continue;
    const int64_t step = event.piece / micro_batches;
    if (step < config.steps) ends[step] = std::max(ends[step], event.end_nanoseconds);
  }
  std::vector<double> milliseconds;
  for (int step = warmup_steps; step < config.steps; ++step) {
    milliseconds.push_back((ends[step] - ends[step - 1]) / 1e6);
  }
  return milliseconds;
}

std::string RunReferenceTiming(const std::string& reference, const std::string& arguments) {
  const std::string output = absl::StrCat("/tmp/loom_bench_reference_", getpid(), ".json");
  const std::string command = absl::StrCat("/usr/bin/python3 ", reference, " ", arguments,
                                           " --output ", output, " > /dev/null");
  if (std::system(command.c_str()) != 0) {
    ExitIfError(absl::InternalError(absl::StrCat("'", command, "' failed")), "PyTorch");
  }
  std::ifstream file(output);
  std::stringstream text;
  text << file.rdbuf();
  std::remove(output.c_str());
  return text.str();
}

double JsonNumber(const std::string& json, const std::string& key) {
  const std::string pattern = absl::StrCat("\"", key, "\":");
  size_t position = json.find(pattern);
  if (position == std::string::npos) {
    ExitIfError(absl::InternalError(absl::StrCat("no '", key, "' in ", json)), "PyTorch output");
  }
  return std::strtod(json.c_str() + position + pattern.size(), nullptr);
}

}  // namespace loom::bench
