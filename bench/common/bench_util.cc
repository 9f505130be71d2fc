#include "bench/common/bench_util.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/tensor.h"
#include "glog/logging.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel.h"

namespace loom::bench {
namespace {

class NoopKernel final : public Kernel {
 public:
  absl::Status Compute(const KernelContext& context) override { return absl::OkStatus(); }
};

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  if (values.size() % 2 == 1) return values[middle];
  return (values[middle - 1] + values[middle]) / 2.0;
}

std::string JoinValues(const std::vector<double>& values, int precision) {
  std::string joined;
  for (double value : values) {
    if (!joined.empty()) joined += ' ';
    joined += absl::StrFormat("%.*f", precision, value);
  }
  return joined;
}

double GemmGflops(const KernelRegistry& kernels) {
  constexpr int kRepetitions = 10;
  constexpr int64_t kSize = 1024;
  plan::KernelConf conf;
  conf.set_op_type("matmul");
  plan::TensorDesc desc;
  desc.add_shape(kSize);
  desc.add_shape(kSize);
  desc.set_data_type(plan::FLOAT32);
  KernelInit init{"gemm", &conf, {desc, desc}, {desc}};
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = kernels.Create(plan::CPU, init);
  ExitIfError(kernel.status(), "building the matmul kernel");
  std::vector<float> a(kSize * kSize, 0.5f), b(kSize * kSize, 0.25f), c(kSize * kSize);
  const Shape shape({kSize, kSize});
  const TensorView inputs[] = {{a.data(), plan::FLOAT32, shape}, {b.data(), plan::FLOAT32, shape}};
  const TensorView outputs[] = {{c.data(), plan::FLOAT32, shape}};
  std::vector<double> gflops;
  for (int repetition = 0; repetition < kRepetitions + 1; ++repetition) {
    const auto start = std::chrono::steady_clock::now();
    ExitIfError((*kernel)->Compute(KernelContext{inputs, outputs, 0}), "running the GEMM");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (repetition > 0) gflops.push_back(2.0 * kSize * kSize * kSize / seconds / 1e9);
  }
  return Median(gflops);
}

std::string MachineCheck() {
  KernelRegistry kernels;
  ExitIfError(RegisterCpuKernels(&kernels), "registering the CPU kernels");
  SetBlasThreads(1);
  const double gemm = GemmGflops(kernels);
  constexpr size_t kBytes = size_t{32} << 20;
  std::vector<char> from(kBytes, 1), to(kBytes, 2);
  std::vector<double> rates;
  for (int repetition = 0; repetition < 10; ++repetition) {
    const auto start = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), kBytes);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    rates.push_back(kBytes / seconds / 1e9);
    from[repetition] = to[repetition + 1];  // keeps the copies from being elided
  }
  std::ifstream file("/proc/loadavg");
  std::string one, five, fifteen;
  file >> one >> five >> fifteen;
  return absl::StrFormat(
      "load %s %s %s, GEMM 1024^3 (1 thread) %.1f GFLOP/s, memcpy 32 MiB %.1f GB/s", one, five,
      fifteen, gemm, Median(rates));
}

void PrintResult(const std::string& name, const std::string& metric, double value,
                 const std::string& peer_metric, double peer_value) {
  const double ratio = peer_value != 0.0 ? value / peer_value : 0.0;
  std::printf("RESULT %s: %s=%.4g %s=%.4g ratio=%.3f\n", name.c_str(), metric.c_str(), value,
              peer_metric.c_str(), peer_value, ratio);
  std::fflush(stdout);
}

void InitLogging(const char* program) {
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(program);
}

void ExitIfError(const absl::Status& status, const std::string& what) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s failed: %s\n", what.c_str(), status.ToString().c_str());
  std::exit(1);
}

absl::Status RegisterNoopKernel(KernelRegistry* registry) {
  return registry->Register("bench_noop", plan::CPU,
                            [](const KernelInit& init) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                              return std::make_unique<NoopKernel>();
                            });
}

}  // namespace loom::bench
