// bench_gpt_step: one training step of the tiny GPT (examples/gpt, default config: V=256, T=64,
// D=128, 4 layers, 4 heads, F=512, batch 16, AdamW) on one CPU device, against the same model
// and step in PyTorch (tests/oracle/reference.py --steps-timing, Debian's python3-torch) on the
// same machine, both at one thread, in one run.
//
// Loom: the job is compiled for cpu:0 and runs kWarmupSteps + kMeasuredSteps steps in one job;
// a step's time is the interval between the ends of successive acts of the loss's sink (the
// step's last forward result; the optimizer of step t overlaps nothing, since step t + 1 reads
// the updated weights). The median over the measured steps is reported.
// PyTorch: median wall time of a step (zero_grad, forward, backward, clipping-free AdamW step)
// over its measured steps, as reference.py reports it.
// Both sides print the GFLOP/s of a 1024^3 float32 GEMM: Loom through its own matmul kernel
// (OpenBLAS), PyTorch through torch.mm; if they differ much, the BLAS libraries differ and the
// comparison says little.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "client/local_run.h"
#include "compiler/compiler.h"
#include "examples/gpt/gpt_model.h"
#include "glog/logging.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/tensor.h"

namespace loom::bench {
namespace {

constexpr int kWarmupSteps = 3;
constexpr int kMeasuredSteps = 20;

struct LoomSteps {
  std::vector<double> step_milliseconds;
};

LoomSteps RunLoom(const KernelRegistry& kernels) {
  gpt::GptConfig config;
  config.steps = kWarmupSteps + kMeasuredSteps;
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  ExitIfError(job.status(), "building the GPT job");
  compiler::OpRegistry ops;
  ExitIfError(compiler::RegisterStandardOps(&ops), "registering the ops");
  absl::StatusOr<compiler::CompileResult> compiled =
      compiler::Compile(*job, ops, compiler::DeviceSet::Cpus(1, 1));
  ExitIfError(compiled.status(), "compiling the GPT job");
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(compiled->plan, kernels, JobOptions{});
  ExitIfError(run.status(), "running the GPT job");
  // The loss sink's act ends, by piece (step).
  uint32_t sink_index = 0;
  bool found = false;
  for (const plan::Task& task : compiled->plan.tasks()) {
    if (task.kind() == plan::SINK && task.inputs(0).rfind("loss", 0) == 0) {
      sink_index = task.index();
      found = true;
    }
  }
  if (!found) ExitIfError(absl::InternalError("the job has no sink of the loss"), "timing");
  std::vector<int64_t> ends(config.steps, 0);
  for (const ActEvent& event : run->runtime->events()) {
    if (event.task_index == sink_index && event.piece < config.steps) {
      ends[event.piece] = event.end_nanoseconds;
    }
  }
  LoomSteps steps;
  for (int step = kWarmupSteps; step < config.steps; ++step) {
    steps.step_milliseconds.push_back((ends[step] - ends[step - 1]) / 1e6);
  }
  return steps;
}

// Runs reference.py's timing mode and returns its JSON as text.
std::string RunPyTorch(const std::string& reference, int steps) {
  const std::string output = "/tmp/loom_bench_gpt_step_torch.json";
  const std::string command =
      absl::StrCat("/usr/bin/python3 ", reference, " --model gpt --threads 1 --steps-timing ",
                   steps, " --warmup ", kWarmupSteps, " --output ", output, " > /dev/null");
  if (std::system(command.c_str()) != 0) {
    ExitIfError(absl::InternalError(absl::StrCat("'", command, "' failed")), "PyTorch");
  }
  std::ifstream file(output);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// The number after "key": in flat JSON.
double JsonNumber(const std::string& json, const std::string& key) {
  const std::string pattern = absl::StrCat("\"", key, "\":");
  size_t position = json.find(pattern);
  if (position == std::string::npos) {
    ExitIfError(absl::InternalError(absl::StrCat("no '", key, "' in ", json)), "PyTorch output");
  }
  return std::strtod(json.c_str() + position + pattern.size(), nullptr);
}

int Main(int argc, char** argv) {
  const std::string reference =
      argc > 1 ? argv[1] : absl::StrCat(LOOM_SOURCE_DIR, "/tests/oracle/reference.py");
  SetBlasThreads(1);
  KernelRegistry kernels;
  ExitIfError(RegisterCpuKernels(&kernels), "registering the CPU kernels");
  std::printf(
      "gpt-step: tiny GPT (V=256 T=64 D=128 L=4 H=4 F=512, batch 16, AdamW), one CPU "
      "device, 1 thread each side; %d warm-up + %d measured steps\n",
      kWarmupSteps, kMeasuredSteps);
  const double loom_gemm = GemmGflops(kernels);
  const LoomSteps loom = RunLoom(kernels);
  const double loom_median = Median(loom.step_milliseconds);
  const std::string torch = RunPyTorch(reference, kMeasuredSteps);
  const double torch_median = JsonNumber(torch, "median_step_ms");
  const double torch_gemm = JsonNumber(torch, "gemm_1024_gflops");
  std::printf(
      "GEMM 1024^3 float32: loom (OpenBLAS via its matmul kernel) %.1f GFLOP/s, "
      "pytorch (torch.mm) %.1f GFLOP/s\n",
      loom_gemm, torch_gemm);
  std::printf("loom step ms: median %.2f  (steps: %s)\n", loom_median,
              JoinValues(loom.step_milliseconds, 1).c_str());
  std::printf("pytorch step ms: median %.2f  min %.2f\n", torch_median,
              JsonNumber(torch, "min_step_ms"));
  std::printf("goal: ratio <= 1.0\n");
  PrintResult("gpt-step", "step_ms", loom_median, "pytorch_ms", torch_median);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  return loom::bench::Main(argc, argv);
}
