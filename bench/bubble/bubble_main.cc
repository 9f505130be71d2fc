// bench_bubble: the pipeline bubble of one-forward-one-backward as it emerges from credits.
//
// A training job of P = 4 stages on cpu:0..3, compiled by Loom's compiler: stage s is a tiny
// matmul with its own weight, then op "sleep" taking 1 ms forward and 2 ms backward (sleeping
// stages use no core, so four stages fit on two). One step of M micro-batches, M in
// {4, 8, 16, 32}. From the runtime's event record:
//  - idle fraction: over the step's span (first act of any stage to the last act of any stage),
//    the mean over stages of 1 - busy / span, against 1F1B's (P - 1) / (M + P - 1);
//  - peak stashed activations per stage (micro-batches between their first forward act and
//    their last backward act there) against 1F1B's bound P - s.
// Also (not in the RESULT line) the same pipeline with each stage on two devices, its weight split
// by columns (tensor parallelism: collectives in both passes of every micro-batch), at M = 8, 32.
// Each M runs kRepetitions times; medians are reported. The RESULT line is the M whose median
// idle fraction is furthest above the formula.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "bench/common/sleep_pipeline.h"
#include "compiler/compiler.h"
#include "glog/logging.h"
#include "kernels/cpu/cpu_kernels.h"

namespace loom::bench {
namespace {

constexpr int kStages = 4;
constexpr SleepPipeline kPipeline{
    .stages = kStages, .forward_microseconds = 1000, .input_microseconds = 2000};
constexpr SleepPipeline kTensorParallelPipeline{.stages = kStages,
                                                .forward_microseconds = 1000,
                                                .input_microseconds = 2000,
                                                .tensor_parallel = 2};
constexpr int kRepetitions = 5;
constexpr double kGoalRatio = 1.05;

int Main() {
  KernelRegistry kernels;
  ExitIfError(RegisterCpuKernels(&kernels), "registering the CPU kernels");
  compiler::OpRegistry ops;
  ExitIfError(compiler::RegisterStandardOps(&ops), "registering the ops");
  std::printf(
      "bubble: %d stages on cpu:0..%d, sleep %lld us forward / %lld us backward, "
      "%d runs per M (medians)\n",
      kStages, kStages - 1, static_cast<long long>(kPipeline.forward_microseconds),
      static_cast<long long>(kPipeline.input_microseconds), kRepetitions);
  std::printf("%4s  %10s  %10s  %6s  %-16s  %-16s\n", "M", "idle", "formula", "ratio", "peak stash",
              "bound (P - s)");
  double worst_ratio = 0;
  double worst_idle = 0;
  double worst_formula = 0;
  int worst_m = 0;
  bool peaks_within_bound = true;
  for (int m : {4, 8, 16, 32}) {
    absl::StatusOr<compiler::CompileResult> compiled =
        compiler::Compile(SleepPipelineJob(kPipeline, m, job::ONE_F_ONE_B), ops,
                          compiler::DeviceSet::Cpus(kStages, 1));
    ExitIfError(compiled.status(), "compiling the bubble job");
    std::vector<double> idle;
    std::vector<int64_t> peaks(kStages, 0);
    for (int repetition = 0; repetition < kRepetitions; ++repetition) {
      const PipelineRun run = RunPipeline(compiled->plan, kernels, kPipeline, job::ONE_F_ONE_B);
      idle.push_back(run.idle_fraction);
      for (int s = 0; s < kStages; ++s) peaks[s] = std::max(peaks[s], run.peaks[s]);
    }
    const double median = Median(idle);
    const double formula = static_cast<double>(kStages - 1) / (m + kStages - 1);
    std::string peak_text;
    std::string bound_text;
    for (int s = 0; s < kStages; ++s) {
      peak_text += absl::StrCat(s == 0 ? "" : " ", peaks[s]);
      bound_text += absl::StrCat(s == 0 ? "" : " ", std::min(kStages - s, m));
      peaks_within_bound = peaks_within_bound && peaks[s] == std::min(kStages - s, m);
    }
    std::printf("%4d  %10.4f  %10.4f  %6.3f  %-16s  %-16s   runs: %s\n", m, median, formula,
                median / formula, peak_text.c_str(), bound_text.c_str(),
                JoinValues(idle, 4).c_str());
    if (median / formula > worst_ratio) {
      worst_ratio = median / formula;
      worst_idle = median;
      worst_formula = formula;
      worst_m = m;
    }
  }
  std::printf("peak stashed activations %s the 1F1B bound on every stage (worst over runs)\n",
              peaks_within_bound ? "equal" : "DIFFER FROM");
  for (int m : {8, 32}) {
    const int devices = kStages * kTensorParallelPipeline.tensor_parallel;
    absl::StatusOr<compiler::CompileResult> compiled =
        compiler::Compile(SleepPipelineJob(kTensorParallelPipeline, m, job::ONE_F_ONE_B), ops,
                          compiler::DeviceSet::Cpus(devices, 1));
    ExitIfError(compiled.status(), "compiling the tensor-parallel bubble job");
    std::vector<double> idle;
    for (int repetition = 0; repetition < kRepetitions; ++repetition) {
      idle.push_back(RunPipeline(compiled->plan, kernels, kTensorParallelPipeline, job::ONE_F_ONE_B)
                         .idle_fraction);
    }
    const double formula = static_cast<double>(kStages - 1) / (m + kStages - 1);
    std::printf(
        "tensor parallel 2 on every stage (%d devices), M = %d: idle %.4f, formula %.4f, "
        "ratio %.3f   runs: %s\n",
        devices, m, Median(idle), formula, Median(idle) / formula, JoinValues(idle, 4).c_str());
  }
  std::printf(
      "goal: idle fraction within %.0f%% of (P - 1) / (M + P - 1) for every M; worst M = %d\n",
      (kGoalRatio - 1) * 100, worst_m);
  PrintResult("bubble", absl::StrCat("idle_fraction_M", worst_m), worst_idle, "formula",
              worst_formula);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::InitLogging(argv[0]);
  return loom::bench::Main();
}
