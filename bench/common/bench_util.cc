#include "bench/common/bench_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/strings/str_format.h"
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

void PrintResult(const std::string& name, const std::string& metric, double value,
                 const std::string& peer_metric, double peer_value) {
  const double ratio = peer_value != 0.0 ? value / peer_value : 0.0;
  std::printf("RESULT %s: %s=%.4g %s=%.4g ratio=%.3f\n", name.c_str(), metric.c_str(), value,
              peer_metric.c_str(), peer_value, ratio);
  std::fflush(stdout);
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
