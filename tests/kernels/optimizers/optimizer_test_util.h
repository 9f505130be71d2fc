#ifndef LOOM_TESTS_KERNELS_OPTIMIZERS_OPTIMIZER_TEST_UTIL_H_
#define LOOM_TESTS_KERNELS_OPTIMIZERS_OPTIMIZER_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "kernels/kernel.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {

// Builds `call`'s kernel through a registry filled by RegisterCpuOptimizerKernels (OpCall::Build
// uses RegisterCpuKernels, which does not hold the optimizer kernels).
absl::StatusOr<std::unique_ptr<Kernel>> BuildOptimizerKernel(const OpCall& call);

// Runs `kernel` on `inputs` and writes output j into the buffer of input output_to_input[j], as the
// runtime does when it updates a parameter and its state in place.
absl::Status ComputeInPlace(Kernel& kernel, std::vector<HostTensor>& inputs,
                            const std::vector<int>& output_to_input, int64_t piece);

// Declares `num_inputs` zeroed float32 inputs and `num_outputs` outputs of `shape` on `call`.
void DeclareTensors(OpCall& call, const Shape& shape, int num_inputs, int num_outputs);

// What an optimizer kernel wrote after each step: [step][output][element], outputs in the kernel's
// order (param_out, then each state_out).
using OptimizerSteps = std::vector<std::vector<std::vector<float>>>;

// Runs grads.size() steps (pieces first_piece, first_piece + 1, ...) of the optimizer kernel built
// from `call` (inputs param, grad, then the states; outputs param_out, then the states' outs),
// starting from `initial` (param, then each state) and feeding each step's outputs back as the next
// step's inputs. With `in_place` the outputs are the inputs' own buffers, as in the runtime;
// otherwise they are separate buffers, and poisoned with NaN before each step.
absl::StatusOr<OptimizerSteps> RunOptimizer(const OpCall& call, const Shape& shape,
                                            const std::vector<std::vector<float>>& initial,
                                            const std::vector<std::vector<float>>& grads,
                                            bool in_place, int64_t first_piece = 0);

// Row `row` of a golden array of `rows` rows of `row_size` floats.
std::vector<float> GoldenRow(absl::Span<const float> values, int64_t row_size, int64_t row);

}  // namespace loom::kernel_test

#endif  // LOOM_TESTS_KERNELS_OPTIMIZERS_OPTIMIZER_TEST_UTIL_H_
