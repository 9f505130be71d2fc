// bench_moe_step: one training step of the MoE GPT (tools/loom-gpt with --experts 4: the tiny GPT
// with an MoE MLP of 4 experts, top-2, capacity factor 1.25 in blocks 1 and 3; batch 16) on two
// CPU devices, data parallel, with the experts split over the two devices (EP=2: the token
// exchange is two all-to-alls per MoE layer and direction) against the experts replicated on
// both (EP=1: every device computes every expert for its half of the batch, and the experts'
// gradients are all-reduced), in one run; and against the same model and step in PyTorch on one
// process (tests/oracle/reference.py --steps-timing), at 1 and at 2 threads, the faster taken.
//
// Loom: each layout runs kWarmupSteps + kMeasuredSteps steps in one job; a step's time is the
// interval between the ends of successive acts of a loss sink. The medians are reported.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "bench/common/gpt_step_timing.h"
#include "glog/logging.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::bench {
namespace {

constexpr int kWarmupSteps = 3;
constexpr int kMeasuredSteps = 20;

gpt::GptConfig MoeConfig(int64_t expert_parallel) {
  gpt::GptConfig config;
  config.experts = 4;
  config.data_parallel = 2;
  config.expert_parallel = expert_parallel;
  config.steps = kWarmupSteps + kMeasuredSteps;
  return config;
}

int Main(int argc, char** argv) {
  const std::string reference =
      argc > 1 ? argv[1] : absl::StrCat(LOOM_SOURCE_DIR, "/tests/oracle/reference.py");
  SetBlasThreads(1);
  KernelRegistry kernels;
  ExitIfError(RegisterCpuKernels(&kernels), "registering the CPU kernels");
  const gpt::GptConfig config = MoeConfig(2);
  std::printf(
      "moe-step: MoE GPT (V=256 T=64 D=128 L=4 H=4, MoE MLP in blocks 1 and 3: E=4, top-2, "
      "capacity factor 1.25, F=512; batch 16, AdamW) on 2 CPU devices (1 thread each); PyTorch "
      "on one process (1 or 2 threads, the faster); %d warm-up + %d measured steps\n",
      kWarmupSteps, kMeasuredSteps);
  std::printf("%s\n", MachineCheck().c_str());
  const std::vector<double> expert_parallel = GptStepMilliseconds(config, kWarmupSteps, kernels);
  const std::vector<double> replicated = GptStepMilliseconds(MoeConfig(1), kWarmupSteps, kernels);
  // PyTorch at 1 and 2 threads: the faster is the peer (on a 2-core machine its 2-thread
  // OpenMP runs are often slower than 1 thread).
  double torch_median = 0;
  int torch_threads = 0;
  for (int threads : {1, 2}) {
    const std::string torch = RunReferenceTiming(
        reference, absl::StrCat("--model moe-gpt --threads ", threads, " --steps-timing ",
                                kMeasuredSteps, " --warmup ", kWarmupSteps));
    const double median = JsonNumber(torch, "median_step_ms");
    std::printf("pytorch (one process, %d thread%s) step ms: median %.2f  min %.2f\n", threads,
                threads == 1 ? "" : "s", median, JsonNumber(torch, "min_step_ms"));
    if (torch_threads == 0 || median < torch_median) {
      torch_median = median;
      torch_threads = threads;
    }
  }
  const double ep2 = Median(expert_parallel);
  const double ep1 = Median(replicated);
  std::printf("loom EP=2 (DP=2) step ms: median %.2f  (steps: %s)\n", ep2,
              JoinValues(expert_parallel, 1).c_str());
  std::printf("loom EP=1 (DP=2) step ms: median %.2f  (steps: %s)\n", ep1,
              JoinValues(replicated, 1).c_str());
  std::printf("peer: pytorch at %d thread%s (its faster setting in this run)\n", torch_threads,
              torch_threads == 1 ? "" : "s");
  PrintResult("moe-step-ep2-vs-ep1", "step_ms", ep2, "ep1_ms", ep1);
  PrintResult("moe-step-vs-pytorch", "step_ms", ep2, "pytorch_ms", torch_median);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::InitLogging(argv[0]);
  return loom::bench::Main(argc, argv);
}
