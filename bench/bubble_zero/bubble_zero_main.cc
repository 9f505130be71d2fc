// bench_bubble_zero: ZeRO stage 3 keeps one-forward-one-backward on a pipeline.
//
// bench_bubble's sleeping pipeline (P = 4 stages, sleep 1 ms forward / 2 ms backward, a tiny
// matmul each) with data parallelism 2: stage s on cpu:2s and cpu:2s+1, the batch split over
// them, on 8 CPU devices of this process; trained replicated and with zero_stage 3 (each
// stage's weight split over its two ranks, gathered for each use, its gradient reduce-scattered),
// alternating, kRepetitions runs of one step each, for M in {8, 32} micro-batches. From the
// runtime's event record: each stage's peak of micro-batches held at once, which must be 1F1B's
// P - s under both, and the idle fraction over the step (bench_bubble's measure). Goal of issue
// 58: ZeRO-3's median idle fraction within 5% of the replicated run's at every M; the RESULT line
// is the M where the ratio is largest.
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
constexpr int kDataParallel = 2;
constexpr int kRepetitions = 5;
constexpr double kGoalRatio = 1.05;

// The idle fractions of `kRepetitions` runs and the worst stash peaks over them.
struct Runs {
  std::vector<double> idle;
  std::vector<int64_t> peaks = std::vector<int64_t>(kStages, 0);
};

constexpr SleepPipeline kPipeline{.stages = kStages,
                                  .forward_microseconds = 1000,
                                  .input_microseconds = 2000,
                                  .data_parallel = kDataParallel};

plan::Plan Compile(int micro_batches, int zero_stage, const compiler::OpRegistry& ops) {
  SleepPipeline pipeline = kPipeline;
  pipeline.zero_stage = zero_stage;
  absl::StatusOr<compiler::CompileResult> compiled =
      compiler::Compile(SleepPipelineJob(pipeline, micro_batches, job::ONE_F_ONE_B), ops,
                        compiler::DeviceSet::Cpus(kStages * kDataParallel, 1));
  ExitIfError(compiled.status(), "compiling the pipeline job");
  return std::move(compiled->plan);
}

std::string Peaks(const std::vector<int64_t>& peaks) {
  std::string text;
  for (size_t s = 0; s < peaks.size(); ++s) absl::StrAppend(&text, s == 0 ? "" : " ", peaks[s]);
  return text;
}

int Main() {
  KernelRegistry kernels;
  ExitIfError(RegisterCpuKernels(&kernels), "registering the CPU kernels");
  compiler::OpRegistry ops;
  ExitIfError(compiler::RegisterStandardOps(&ops), "registering the ops");
  std::printf(
      "bubble-zero: %d stages x DP %d on cpu:0..%d, sleep 1000 us forward / 2000 us backward, "
      "1F1B, replicated against zero_stage 3, %d runs each per M (medians)\n",
      kStages, kDataParallel, kStages * kDataParallel - 1, kRepetitions);
  double worst_ratio = 0;
  double worst_zero = 0;
  double worst_replicated = 0;
  int worst_m = 0;
  bool peaks_as_1f1b = true;
  for (int m : {8, 32}) {
    const plan::Plan replicated_plan = Compile(m, 0, ops);
    const plan::Plan zero_plan = Compile(m, 3, ops);
    Runs replicated;
    Runs zero;
    for (int repetition = 0; repetition < kRepetitions; ++repetition) {
      for (auto [plan, runs] : {std::pair{&replicated_plan, &replicated}, {&zero_plan, &zero}}) {
        const PipelineRun run = RunPipeline(*plan, kernels, kPipeline, job::ONE_F_ONE_B);
        runs->idle.push_back(run.idle_fraction);
        for (int s = 0; s < kStages; ++s) runs->peaks[s] = std::max(runs->peaks[s], run.peaks[s]);
      }
    }
    std::vector<int64_t> bound;
    for (int s = 0; s < kStages; ++s) bound.push_back(std::min(kStages - s, m));
    peaks_as_1f1b = peaks_as_1f1b && replicated.peaks == bound && zero.peaks == bound;
    const double ratio = Median(zero.idle) / Median(replicated.idle);
    std::printf(
        "M=%d: idle replicated %.4f (runs %s), zero_stage 3 %.4f (runs %s), ratio %.3f; peak "
        "stash replicated %s, zero_stage 3 %s, 1F1B bound %s\n",
        m, Median(replicated.idle), JoinValues(replicated.idle, 4).c_str(), Median(zero.idle),
        JoinValues(zero.idle, 4).c_str(), ratio, Peaks(replicated.peaks).c_str(),
        Peaks(zero.peaks).c_str(), Peaks(bound).c_str());
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst_zero = Median(zero.idle);
      worst_replicated = Median(replicated.idle);
      worst_m = m;
    }
  }
  std::printf("peak stashed activations %s 1F1B's bound P - s on every stage (worst over runs)\n",
              peaks_as_1f1b ? "equal" : "DIFFER FROM");
  std::printf("GOAL bubble-zero: ratio <= %.2f at every M (lower is better); worst M = %d\n",
              kGoalRatio, worst_m);
  PrintResult("bubble-zero", absl::StrCat("zero3_idle_M", worst_m), worst_zero, "replicated_idle",
              worst_replicated);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::InitLogging(argv[0]);
  return loom::bench::Main();
}
