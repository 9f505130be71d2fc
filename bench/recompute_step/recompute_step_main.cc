// bench_recompute_step: the step time of a GPT trained with full activation recomputation
// (Job.recompute RECOMPUTE_FULL: every block recomputed from its input in the backward) against
// the same job keeping its activations (RECOMPUTE_NONE), on one CPU device at one BLAS thread, in
// one run. The recomputation adds one forward of the blocks (about a third of a step's work), so
// the goal of issue 58 is a ratio <= 1.4.
//
// The model: tools/loom-gpt's GPT at V=2048 T=256 D=256 L=4 H=4 F=1024, batch 4, AdamW. Each
// side runs kWarmupSteps + kMeasuredSteps steps in one job; a step's time is the interval
// between the ends of successive acts of the loss's sink (GptStepMilliseconds), and the medians
// are compared. The two sides alternate kRounds times and the medians of all their steps count.
#include <cstdio>
#include <vector>

#include "bench/common/bench_util.h"
#include "bench/common/gpt_step_timing.h"
#include "glog/logging.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::bench {
namespace {

constexpr int kWarmupSteps = 2;
constexpr int kMeasuredSteps = 6;
constexpr int kRounds = 3;
constexpr double kGoalRatio = 1.4;

gpt::GptConfig StepGpt(job::Recompute recompute) {
  gpt::GptConfig config;
  config.vocab = 2048;
  config.context = 256;
  config.width = 256;
  config.layers = 4;
  config.heads = 4;
  config.mlp_width = 1024;
  config.batch = 4;
  config.steps = kWarmupSteps + kMeasuredSteps;
  config.recompute = recompute;
  return config;
}

int Main() {
  SetBlasThreads(1);
  KernelRegistry kernels;
  ExitIfError(RegisterCpuKernels(&kernels), "registering the CPU kernels");
  std::printf(
      "recompute-step: GPT V=2048 T=256 D=256 L=4 H=4 F=1024, batch 4, AdamW, one CPU device, "
      "1 thread; full recomputation against none, %d rounds of %d warm-up + %d measured steps\n",
      kRounds, kWarmupSteps, kMeasuredSteps);
  std::vector<double> full;
  std::vector<double> none;
  for (int round = 0; round < kRounds; ++round) {
    for (double ms : GptStepMilliseconds(StepGpt(job::RECOMPUTE_NONE), kWarmupSteps, kernels)) {
      none.push_back(ms);
    }
    for (double ms : GptStepMilliseconds(StepGpt(job::RECOMPUTE_FULL), kWarmupSteps, kernels)) {
      full.push_back(ms);
    }
  }
  std::printf("none step ms: median %.2f  (steps: %s)\n", Median(none),
              JoinValues(none, 1).c_str());
  std::printf("full step ms: median %.2f  (steps: %s)\n", Median(full),
              JoinValues(full, 1).c_str());
  std::printf("GOAL recompute-step: ratio <= %.1f (lower is better)\n", kGoalRatio);
  PrintResult("recompute-step", "full_ms", Median(full), "none_ms", Median(none));
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::InitLogging(argv[0]);
  return loom::bench::Main();
}
