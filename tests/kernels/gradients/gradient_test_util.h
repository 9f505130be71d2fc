#ifndef LOOM_TESTS_KERNELS_GRADIENTS_GRADIENT_TEST_UTIL_H_
#define LOOM_TESTS_KERNELS_GRADIENTS_GRADIENT_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/kernel.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {

// Builds `call`'s kernel through a registry filled by RegisterCpuGradientKernels only.
absl::StatusOr<std::unique_ptr<Kernel>> BuildGradient(const OpCall& call);

// Builds `call`'s kernel as BuildGradient does and runs it once on the call's tensors.
absl::Status RunGradient(OpCall& call);

// Runs the forward `call` (a kernel built through RegisterCpuKernels) once and returns its float32
// output `index`.
absl::StatusOr<std::vector<float>> RunForward(OpCall& call, int index = 0);

// The central-difference gradient, in double, of
//   L = sum over outputs o of sum_j weights[o][j] * output_o[j]
// with respect to every element of float32 input `input_index` of the forward `call` (built
// through RegisterCpuKernels). Each element is moved to x + h and x - h (in float); the weighted
// differences of the outputs are summed in double and divided by the distance between the two
// float inputs. The differences for h = step and h = step / 2 are combined by Richardson
// extrapolation, which cancels their h^2 error terms, so that the step can be large enough for the
// float32 rounding of the forward outputs not to matter. The input is restored afterwards. An
// empty weight vector leaves that output out of L.
absl::StatusOr<std::vector<double>> NumericGradient(OpCall& call, int input_index,
                                                    const std::vector<std::vector<float>>& weights,
                                                    float step = 8e-2f);

// Expects every analytic[i] within relative_tolerance of numeric[i]: |a - n| must not exceed
// relative_tolerance * max(|n|, floor), where floor is 5% of the largest |n| (so that entries
// that happen to be near zero are compared at the gradient's scale) and at least 1e-6.
void ExpectGradientNear(const std::vector<float>& analytic, const std::vector<double>& numeric,
                        const std::string& what, double relative_tolerance = 1e-3);

// `values` moved at least `margin` away from 0 (keeping their sign), for functions with a kink
// there.
std::vector<float> AwayFromZero(std::vector<float> values, float margin);

}  // namespace loom::kernel_test

#endif  // LOOM_TESTS_KERNELS_GRADIENTS_GRADIENT_TEST_UTIL_H_
