// bench_memory: the memory a GPT training step takes on one device in Loom against what the same
// model and step must keep in PyTorch 1.13.
//
// The model: tools/loom-gpt's GPT at V=8192 T=512 D=512 L=8 H=8 F=2048 (33.9M parameters, untied
// head), 2 sequences per step, AdamW in float32, on cpu:0 of this process, kSteps steps.
// Loom: the runtime's measured peak of the device (DeviceMemory::peak_bytes: every register,
// optimizer state and sink copy it allocated or was charged, at their most at once), beside the
// compiler's estimate of that device (EstimateMemory on the node plans), which must not be below
// the peak.
// PyTorch (bench/memory/pytorch_memory.py, the same model from tests/oracle/models.py): its model
// states (parameters, gradients, AdamW's two states: 16 bytes per parameter) plus the bytes
// autograd saves for the backward during a step's forward (saved_tensors_hooks, each storage
// once): what it must keep, whatever its allocator does.
//
//   bench_memory [--separate | --recompute] [--script PATH]
// --separate compiles the job with Job.register_memory = REGISTER_MEMORY_SEPARATE (every register
// keeps buffers of its own), for comparison; its RESULT line is named "memory-separate".
// --recompute compiles it with Job.recompute = RECOMPUTE_FULL (each block recomputed from its
// input in the backward), against PyTorch running each block under torch.utils.checkpoint, whose
// must-keep adds to the model states the bytes saved in the forward (the blocks' inputs and what
// lies outside the blocks) and the largest block's bytes saved while it is recomputed; its
// RESULT line is named "memory-recompute" (`make bench BENCH=memory-recompute` runs it).
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/common/bench_util.h"
#include "bench/common/command.h"
#include "bench/common/gpt_step_timing.h"
#include "bench/common/memory_gpt.h"
#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "glog/logging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "node/device_backends.h"
#include "node/local_run.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::bench {
namespace {

#ifndef LOOM_MEMORY_RECOMPUTE
#define LOOM_MEMORY_RECOMPUTE 0  // bench_memory_recompute is built with 1: --recompute by default
#endif

constexpr const char* kPython = "/usr/bin/python3";
constexpr int kSteps = 2;
constexpr double kGoalRatio = 1.1;
constexpr double kMiB = 1024.0 * 1024.0;

struct LoomMemory {
  compiler::DeviceMemoryEstimate estimate;
  int64_t peak_bytes = 0;
  int64_t allocated_at_end_bytes = 0;
  // The plan's memory pools of the device (none with separate registers).
  int64_t pools = 0;
  int64_t pool_bytes = 0;
  int64_t pool_unshared_bytes = 0;
  int64_t pooled_registers = 0;
};

// Compiles the GPT for cpu:0, runs its steps in this process and reads the device's memory.
LoomMemory MeasureLoom(const gpt::GptConfig& config, bool separate, const KernelRegistry& kernels) {
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  ExitIfError(job.status(), "building the GPT job");
  if (separate) job->set_register_memory(job::REGISTER_MEMORY_SEPARATE);
  compiler::OpRegistry ops;
  ExitIfError(compiler::RegisterStandardOps(&ops), "registering the ops");
  absl::StatusOr<compiler::CompileResult> compiled =
      compiler::Compile(*job, ops, compiler::DeviceSet::Cpus(1, 1));
  ExitIfError(compiled.status(), "compiling the GPT job");
  const std::vector<compiler::DeviceMemoryEstimate> estimates =
      compiler::EstimateMemory(compiled->node_plans);
  if (estimates.size() != 1) {
    ExitIfError(absl::InternalError(
                    absl::StrCat("the estimate covers ", estimates.size(), " devices, expected 1")),
                "estimating the memory");
  }
  LoomMemory memory;
  memory.estimate = estimates[0];
  for (const plan::MemoryPool& pool : compiled->plan.memory_pools()) {
    ++memory.pools;
    memory.pool_bytes += pool.bytes();
    memory.pool_unshared_bytes += pool.unshared_bytes();
    memory.pooled_registers += pool.num_registers();
  }
  JobOptions options;
  // As under loomd: the sinks keep no copies (the compiler's estimate does not count them).
  options.keep_sink_pieces = false;
  ExitIfError(SetUpDevices(compiled->plan, &options), "setting up the devices");
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(compiled->plan, kernels, std::move(options));
  ExitIfError(run.status(), "running the GPT job");
  const auto& memories = run->runtime->device_memories();
  if (memories.size() != 1) {
    ExitIfError(absl::InternalError(absl::StrCat("the runtime has ", memories.size(),
                                                 " device memories, expected 1")),
                "reading the memory");
  }
  memory.peak_bytes = memories[0]->peak_bytes();
  memory.allocated_at_end_bytes = memories[0]->allocated_bytes();
  return memory;
}

// The peer's JSON line (pytorch_memory.py with the config's model).
std::string RunPyTorch(const std::string& script, const gpt::GptConfig& config) {
  const std::string command = absl::StrCat(
      "timeout 900 ", kPython, " ", script, " --vocab ", config.vocab, " --context ",
      config.context, " --width ", config.width, " --layers ", config.layers, " --heads ",
      config.heads, " --mlp-width ", config.mlp_width, " --batch ", config.batch, " --steps ",
      kSteps, config.recompute == job::RECOMPUTE_FULL ? " --recompute full" : "");
  absl::StatusOr<std::string> output = RunCommand(command);
  ExitIfError(output.status(), "PyTorch");
  return *output;
}

int Main(int argc, char** argv) {
  bool separate = false;
  bool recompute = LOOM_MEMORY_RECOMPUTE != 0;
  std::string script = absl::StrCat(LOOM_SOURCE_DIR, "/bench/memory/pytorch_memory.py");
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--separate") {
      separate = true;
    } else if (argument == "--recompute") {
      recompute = true;
    } else if (argument == "--script" && i + 1 < argc) {
      script = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: %s [--separate | --recompute] [--script PATH]\n(unknown argument "
                   "'%s')\n",
                   argv[0], argument.c_str());
      return 2;
    }
  }
  if (!ProgramExists(kPython) || !RunCommand(absl::StrCat(kPython, " -c 'import torch'")).ok()) {
    std::fprintf(stderr,
                 "memory: the peer PyTorch is not importable by %s (Debian package "
                 "python3-torch; scripts/install-deps installs it)\n",
                 kPython);
    return 2;
  }
  KernelRegistry kernels;
  ExitIfError(RegisterCpuKernels(&kernels), "registering the CPU kernels");
  if (separate && recompute) {
    std::fprintf(stderr, "%s: --separate and --recompute are two different runs\n", argv[0]);
    return 2;
  }
  gpt::GptConfig config = MemoryGpt(/*batch=*/2, kSteps);
  if (recompute) config.recompute = job::RECOMPUTE_FULL;
  const int64_t parameters = ParameterCount(config);
  const double model_state_mib = 16.0 * static_cast<double>(parameters) / kMiB;
  std::printf(
      "memory: GPT V=%lld T=%lld D=%lld L=%lld H=%lld F=%lld (%.2fM parameters), %lld sequences "
      "per step, AdamW float32, one CPU device, %d steps; registers %s; recompute %s\n",
      static_cast<long long>(config.vocab), static_cast<long long>(config.context),
      static_cast<long long>(config.width), static_cast<long long>(config.layers),
      static_cast<long long>(config.heads), static_cast<long long>(config.mlp_width),
      parameters / 1e6, static_cast<long long>(config.batch), kSteps,
      separate ? "separate (REGISTER_MEMORY_SEPARATE)" : "shared (REGISTER_MEMORY_SHARED)",
      recompute ? "full (RECOMPUTE_FULL; the peer: torch.utils.checkpoint per block)" : "none");

  const LoomMemory loom = MeasureLoom(config, separate, kernels);
  const double peak_mib = loom.peak_bytes / kMiB;
  const double estimate_mib = loom.estimate.total_bytes() / kMiB;
  std::printf(
      "loom estimate: %.2f MiB (registers %.2f, optimizer states and accumulators %.2f, "
      "staging %.2f)\n",
      estimate_mib, loom.estimate.register_bytes / kMiB, loom.estimate.state_bytes / kMiB,
      loom.estimate.staging_bytes / kMiB);
  if (loom.pools > 0) {
    std::printf(
        "loom memory pools: %lld holding %.2f MiB for %lld registers that would take %.2f MiB "
        "apart\n",
        static_cast<long long>(loom.pools), loom.pool_bytes / kMiB,
        static_cast<long long>(loom.pooled_registers), loom.pool_unshared_bytes / kMiB);
  } else {
    std::printf("loom memory pools: none\n");
  }
  std::printf("loom measured peak: %.2f MiB (allocated after the run: %.2f MiB)\n", peak_mib,
              loom.allocated_at_end_bytes / kMiB);
  std::printf(
      "loom model states (16 bytes per parameter): %.2f MiB; the rest of the peak: %.2f "
      "MiB\n",
      model_state_mib, peak_mib - model_state_mib);
  if (loom.peak_bytes > 0) {
    std::printf("estimate / peak: %.4f (must be >= 1; goal of issue 58: within 1.05)\n",
                static_cast<double>(loom.estimate.total_bytes()) / loom.peak_bytes);
  }
  if (loom.estimate.total_bytes() < loom.peak_bytes) {
    std::printf(
        "WARNING: the compiler's estimate (%.2f MiB) is below the measured peak (%.2f "
        "MiB)\n",
        estimate_mib, peak_mib);
  }

  const std::string peer = RunPyTorch(script, config);
  const double pytorch_mib = JsonNumber(peer, "pytorch_mib");
  std::printf(
      "pytorch must keep: %.2f MiB (model states %.2f: parameters %.2f, gradients %.2f, AdamW "
      "states %.2f; saved for backward %.2f, of which recomputed %.2f)\n",
      pytorch_mib, JsonNumber(peer, "model_state_mib"), JsonNumber(peer, "parameter_mib"),
      JsonNumber(peer, "gradient_mib"), JsonNumber(peer, "optimizer_state_mib"),
      JsonNumber(peer, "saved_mib"), JsonNumber(peer, "recomputed_mib"));
  if (static_cast<int64_t>(JsonNumber(peer, "parameters")) != parameters) {
    std::printf("WARNING: the peer's model has %.0f parameters, Loom's %lld\n",
                JsonNumber(peer, "parameters"), static_cast<long long>(parameters));
  }
  std::printf("GOAL memory: ratio <= %.1f (lower is better)\n", kGoalRatio);
  PrintResult(separate ? "memory-separate" : (recompute ? "memory-recompute" : "memory"),
              "loom_peak_mib", peak_mib, "pytorch_mib", pytorch_mib);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::InitLogging(argv[0]);
  return loom::bench::Main(argc, argv);
}
