#include "tests/kernels/gradients/gradient_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gradients/gradient_kernels.h"
#include "kernels/kernel_registry.h"

namespace loom::kernel_test {

absl::StatusOr<std::unique_ptr<Kernel>> BuildGradient(const OpCall& call) {
  KernelRegistry registry;
  absl::Status status = RegisterCpuGradientKernels(&registry);
  if (!status.ok()) return status;
  return registry.Create(plan::CPU, call.Init());
}

absl::Status RunGradient(OpCall& call) {
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildGradient(call);
  if (!kernel.ok()) return kernel.status();
  return call.Compute(**kernel);
}

absl::StatusOr<std::vector<float>> RunForward(OpCall& call, int index) {
  absl::Status status = call.Run();
  if (!status.ok()) return status;
  return call.OutputFloats(index);
}

namespace {

// The central difference of L (see NumericGradient) at element `i` of `values` with `step`.
absl::StatusOr<double> CentralDifference(OpCall& call, Kernel& kernel, float* values, int64_t i,
                                         const std::vector<std::vector<float>>& weights,
                                         float step) {
  const float original = values[i];
  const float above = original + step;
  const float below = original - step;
  std::vector<std::vector<float>> plus(weights.size());
  values[i] = above;
  absl::Status status = call.Compute(kernel);
  if (!status.ok()) return status;
  for (size_t o = 0; o < weights.size(); ++o) {
    if (!weights[o].empty()) plus[o] = call.OutputFloats(static_cast<int>(o));
  }
  values[i] = below;
  status = call.Compute(kernel);
  values[i] = original;
  if (!status.ok()) return status;
  double difference = 0.0;
  for (size_t o = 0; o < weights.size(); ++o) {
    if (weights[o].empty()) continue;
    const std::vector<float> minus = call.OutputFloats(static_cast<int>(o));
    if (minus.size() != weights[o].size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "output ", o, " has ", minus.size(), " elements but ", weights[o].size(), " weights"));
    }
    for (size_t j = 0; j < minus.size(); ++j) {
      difference += static_cast<double>(weights[o][j]) *
                    (static_cast<double>(plus[o][j]) - static_cast<double>(minus[j]));
    }
  }
  return difference / (static_cast<double>(above) - static_cast<double>(below));
}

}  // namespace

absl::StatusOr<std::vector<double>> NumericGradient(OpCall& call, int input_index,
                                                    const std::vector<std::vector<float>>& weights,
                                                    float step) {
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = call.Build();
  if (!kernel.ok()) return kernel.status();
  HostTensor& input = call.input(input_index);
  if (input.data_type != plan::FLOAT32) {
    return absl::InvalidArgumentError(absl::StrCat("input ", input_index, " is not float32"));
  }
  float* values = reinterpret_cast<float*>(input.bytes.data());
  const int64_t count = input.shape.NumElements();
  std::vector<double> gradient(count, 0.0);
  for (int64_t i = 0; i < count; ++i) {
    absl::StatusOr<double> wide = CentralDifference(call, **kernel, values, i, weights, step);
    if (!wide.ok()) return wide.status();
    absl::StatusOr<double> narrow =
        CentralDifference(call, **kernel, values, i, weights, 0.5f * step);
    if (!narrow.ok()) return narrow.status();
    // Richardson extrapolation: the h^2 terms of the two differences cancel.
    gradient[i] = (4.0 * *narrow - *wide) / 3.0;
  }
  return gradient;
}

void ExpectGradientNear(const std::vector<float>& analytic, const std::vector<double>& numeric,
                        const std::string& what, double relative_tolerance) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  double largest = 0.0;
  for (double value : numeric) largest = std::max(largest, std::abs(value));
  const double floor = std::max(5e-2 * largest, 1e-6);
  for (size_t i = 0; i < numeric.size(); ++i) {
    const double tolerance = relative_tolerance * std::max(std::abs(numeric[i]), floor);
    EXPECT_NEAR(analytic[i], numeric[i], tolerance) << what << " element " << i;
  }
}

std::vector<float> AwayFromZero(std::vector<float> values, float margin) {
  for (float& value : values) value = value < 0.0f ? value - margin : value + margin;
  return values;
}

}  // namespace loom::kernel_test
