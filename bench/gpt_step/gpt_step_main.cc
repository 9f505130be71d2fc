// bench_gpt_step: one training step of the tiny GPT (tools/loom-gpt, default config: V=256, T=64,
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
  gpt::GptConfig config;
  config.steps = kWarmupSteps + kMeasuredSteps;
  const std::vector<double> loom = GptStepMilliseconds(config, kWarmupSteps, kernels);
  const double loom_median = Median(loom);
  const std::string torch =
      RunReferenceTiming(reference, absl::StrCat("--model gpt --threads 1 --steps-timing ",
                                                 kMeasuredSteps, " --warmup ", kWarmupSteps));
  const double torch_median = JsonNumber(torch, "median_step_ms");
  const double torch_gemm = JsonNumber(torch, "gemm_1024_gflops");
  std::printf(
      "GEMM 1024^3 float32: loom (OpenBLAS via its matmul kernel) %.1f GFLOP/s, "
      "pytorch (torch.mm) %.1f GFLOP/s\n",
      loom_gemm, torch_gemm);
  std::printf("loom step ms: median %.2f  (steps: %s)\n", loom_median, JoinValues(loom, 1).c_str());
  std::printf("pytorch step ms: median %.2f  min %.2f\n", torch_median,
              JsonNumber(torch, "min_step_ms"));
  std::printf("goal: ratio <= 1.0\n");
  PrintResult("gpt-step", "step_ms", loom_median, "pytorch_ms", torch_median);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::InitLogging(argv[0]);
  return loom::bench::Main(argc, argv);
}
