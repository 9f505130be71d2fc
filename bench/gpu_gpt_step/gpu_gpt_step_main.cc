// bench_gpu_gpt_step: one training step of a GPT of width 1024, 12 layers, 16 heads, context 1024
// (vocabulary 256, MLP width 4096, batch 8, AdamW) with bfloat16 matmuls (float32 master
// weights and optimizer state) on one GPU, against the same model and step in PyTorch eager on
// the same GPU in the same run (bench/gpu_gpt_step/torch_gpt_step.py under --python: the model
// of tests/oracle/models.py under torch.autocast).
//
//   bench_gpu_gpt_step [--python PY] [--source-dir DIR] [--device cuda|cpu] [--rounds R]
//                      [--warmup W] [--steps S] [--batch B] [--context T] [--width D]
//                      [--layers L] [--heads H] [--mlp-width F] [--vocab V] [--float32]
//                      [--peak-tflops P]
//
// Loom: tools/loom-gpt's job (the oracle tests' model) compiled for cuda:0 (its token batches read
// on cpu:0) and run in this process, W + S steps per job; a step's time is the interval between
// the ends of successive acts of the loss's sink (step t + 1 reads the weights step t updated).
// PyTorch: host wall time of zero_grad, forward, backward and AdamW's step, with the device
// synchronised before and after. The sides alternate, one job each per round, R rounds; each
// side's figure is the median over all its measured steps. Model FLOPs per step are
// 6 x (matmul weights) x tokens + 12 x L x B x T^2 x D (attention's two products, forward and
// backward, counted whole as is usual); MFU divides the achieved rate by the GPU's dense
// bfloat16 peak (from its name: H100 SXM/H200 989, H100 PCIe 756, A100 312 TFLOP/s; or
// --peak-tflops).
//
// Differences, stated: Loom runs attention composed (matmuls, masked softmax) with its products in
// float32, PyTorch's autocast runs those products in bfloat16; PyTorch's batch is random tokens,
// Loom's is read from a token file (the same shapes). Without a GPU it says so and exits 0
// without a RESULT line; --device cpu runs both sides on the CPU, also without a RESULT line (a
// check of the harness with a small model: slow at the default size).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/common/bench_util.h"
#include "bench/common/command.h"
#include "bench/common/gpt_step_timing.h"
#include "device/cuda/cuda_devices.h"
#include "glog/logging.h"
#include "node/device_backends.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::bench {
namespace {

struct Options {
  std::string python = "python3";
  std::string source_dir = LOOM_SOURCE_DIR;
  std::string device = "cuda";
  int rounds = 2;
  int warmup = 3;
  int steps = 10;
  gpt::GptConfig config;
  double peak_tflops = 0;  // 0: from the GPU's name
};

gpt::GptConfig DefaultConfig() {
  gpt::GptConfig config;
  config.vocab = 256;
  config.context = 1024;
  config.width = 1024;
  config.layers = 12;
  config.heads = 16;
  config.mlp_width = 4096;
  config.batch = 8;
  config.matmul_data_type = plan::BFLOAT16;
  return config;
}

[[noreturn]] void Usage(const std::string& bad) {
  std::fprintf(stderr,
               "usage: bench_gpu_gpt_step [--python PY] [--source-dir DIR] [--device cuda|cpu] "
               "[--rounds R] [--warmup W] [--steps S] [--batch B] [--context T] [--width D] "
               "[--layers L] [--heads H] [--mlp-width F] [--vocab V] [--float32] "
               "[--peak-tflops P] (bad: %s)\n",
               bad.c_str());
  std::exit(2);
}

Options ParseOptions(int argc, char** argv) {
  Options options;
  options.config = DefaultConfig();
  gpt::GptConfig& config = options.config;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--float32") {
      config.matmul_data_type = plan::FLOAT32;
      continue;
    }
    if (i + 1 >= argc) Usage(flag);
    const std::string value = argv[++i];
    const std::vector<std::pair<const char*, int64_t*>> sizes = {
        {"--batch", &config.batch}, {"--context", &config.context},
        {"--width", &config.width}, {"--layers", &config.layers},
        {"--heads", &config.heads}, {"--mlp-width", &config.mlp_width},
        {"--vocab", &config.vocab}};
    bool ok = true;
    auto size = std::find_if(sizes.begin(), sizes.end(),
                             [&](const auto& entry) { return flag == entry.first; });
    if (size != sizes.end()) {
      ok = absl::SimpleAtoi(value, size->second) && *size->second > 0;
    } else if (flag == "--python") {
      options.python = value;
    } else if (flag == "--source-dir") {
      options.source_dir = value;
    } else if (flag == "--device") {
      options.device = value;
      ok = value == "cuda" || value == "cpu";
    } else if (flag == "--rounds") {
      ok = absl::SimpleAtoi(value, &options.rounds) && options.rounds > 0;
    } else if (flag == "--warmup") {
      ok = absl::SimpleAtoi(value, &options.warmup) && options.warmup > 0;
    } else if (flag == "--steps") {
      ok = absl::SimpleAtoi(value, &options.steps) && options.steps > 0;
    } else if (flag == "--peak-tflops") {
      ok = absl::SimpleAtod(value, &options.peak_tflops) && options.peak_tflops > 0;
    } else {
      ok = false;
    }
    if (!ok) Usage(absl::StrCat(flag, " ", value));
  }
  config.steps = options.warmup + options.steps;
  config.device_type = options.device;
  if (absl::Status valid = gpt::ValidateGptConfig(config); !valid.ok()) {
    Usage(std::string(valid.message()));
  }
  return options;
}

// Model FLOPs of one training step (see the file comment).
double StepFlops(const gpt::GptConfig& config) {
  const double b = config.batch, t = config.context, d = config.width, f = config.mlp_width;
  const double l = config.layers, v = config.vocab;
  const double matmul_weights = l * (4 * d * d + 2 * d * f) + d * v;
  return 6 * matmul_weights * b * t + 12 * l * b * t * t * d;
}

// The dense bfloat16 peak of a GPU named `name`, in TFLOP/s; 0 when unknown.
double PeakTflops(const std::string& name) {
  if (absl::StrContains(name, "H100")) return absl::StrContains(name, "PCIe") ? 756 : 989;
  if (absl::StrContains(name, "H200")) return 989;
  if (absl::StrContains(name, "A100")) return 312;
  return 0;
}

// One job of the PyTorch peer in a process of its own; its measured step times.
std::vector<double> TorchSteps(const Options& options) {
  const gpt::GptConfig& config = options.config;
  const std::string command = absl::StrCat(
      options.python, " ", options.source_dir, "/bench/gpu_gpt_step/torch_gpt_step.py",
      " --models-dir ", options.source_dir, "/tests/oracle --device ", options.device, " --vocab ",
      config.vocab, " --context ", config.context, " --width ", config.width, " --layers ",
      config.layers, " --heads ", config.heads, " --mlp-width ", config.mlp_width, " --batch ",
      config.batch, " --warmup ", options.warmup, " --steps ", options.steps,
      config.matmul_data_type == plan::BFLOAT16 ? " --bfloat16" : "");
  absl::StatusOr<std::string> output = RunCommand(command);
  ExitIfError(output.status(), "running the PyTorch peer");
  std::vector<double> steps;
  for (absl::string_view line : absl::StrSplit(*output, '\n')) {
    double value;
    if (absl::ConsumePrefix(&line, "torch_step_ms ") && absl::SimpleAtod(line, &value)) {
      steps.push_back(value);
    }
  }
  if (steps.empty()) {
    std::fprintf(stderr, "the PyTorch peer printed no step times:\n%s\n", output->c_str());
    std::exit(1);
  }
  return steps;
}

int Main(int argc, char** argv) {
  const Options options = ParseOptions(argc, argv);
  const gpt::GptConfig& config = options.config;
  std::string device_name = "the CPU";
  compiler::DeviceSet devices;
  if (options.device == "cuda") {
    if (absl::StatusOr<int> count = cuda::DeviceCount(); !count.ok()) {
      std::printf("gpu-gpt-step: skipped: %s\n", std::string(count.status().message()).c_str());
      return 0;
    }
    absl::StatusOr<std::string> description = cuda::DeviceDescription(0);
    ExitIfError(description.status(), "finding a GPU");
    device_name = *description;
    plan::Device gpu;
    gpu.set_node(0);
    gpu.set_type(plan::CUDA);
    gpu.set_index(0);
    devices.devices.push_back(gpu);
  }
  const char* precision = config.matmul_data_type == plan::BFLOAT16 ? "bf16 matmuls" : "float32";
  std::printf(
      "gpu-gpt-step: GPT V=%lld T=%lld D=%lld L=%lld H=%lld F=%lld, batch %lld, AdamW, %s, on "
      "%s; %d rounds of %d warm-up + %d measured steps per side\n",
      static_cast<long long>(config.vocab), static_cast<long long>(config.context),
      static_cast<long long>(config.width), static_cast<long long>(config.layers),
      static_cast<long long>(config.heads), static_cast<long long>(config.mlp_width),
      static_cast<long long>(config.batch), precision, device_name.c_str(), options.rounds,
      options.warmup, options.steps);
  KernelRegistry kernels;
  ExitIfError(RegisterAllKernels(&kernels), "registering the kernels");
  std::vector<double> loom;
  std::vector<double> torch;
  for (int round = 0; round < options.rounds; ++round) {
    std::vector<double> loom_round = GptStepMilliseconds(config, options.warmup, kernels, devices);
    std::vector<double> torch_round = TorchSteps(options);
    std::printf("round %d: loom step ms %s | pytorch step ms %s\n", round + 1,
                JoinValues(loom_round, 2).c_str(), JoinValues(torch_round, 2).c_str());
    loom.insert(loom.end(), loom_round.begin(), loom_round.end());
    torch.insert(torch.end(), torch_round.begin(), torch_round.end());
  }
  const double loom_ms = Median(loom);
  const double torch_ms = Median(torch);
  const double flops = StepFlops(config);
  std::printf(
      "median step: loom %.2f ms (%.3g TFLOP/s), pytorch %.2f ms (%.3g TFLOP/s); %.3g "
      "model FLOPs per step\n",
      loom_ms, flops / (loom_ms / 1e3) / 1e12, torch_ms, flops / (torch_ms / 1e3) / 1e12, flops);
  const double peak = options.peak_tflops > 0 ? options.peak_tflops : PeakTflops(device_name);
  if (peak > 0 && config.matmul_data_type == plan::BFLOAT16) {
    std::printf("MFU (of %.0f TFLOP/s dense bf16): loom %.1f%%, pytorch %.1f%%\n", peak,
                100 * flops / (loom_ms / 1e3) / 1e12 / peak,
                100 * flops / (torch_ms / 1e3) / 1e12 / peak);
  }
  if (options.device == "cpu") {
    std::printf(
        "a check of the harness on the CPU: no RESULT line (it measures nothing about "
        "GPUs)\n");
    return 0;
  }
  std::printf("goal: ratio <= 1.0\n");
  PrintResult("gpu-gpt-step", "step_ms", loom_ms, "pytorch_ms", torch_ms);
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::InitLogging(argv[0]);
  return loom::bench::Main(argc, argv);
}
