#ifndef LOOM_KERNELS_CPU_GRADIENTS_BROADCAST_GRAD_KERNELS_H_
#define LOOM_KERNELS_CPU_GRADIENTS_BROADCAST_GRAD_KERNELS_H_

// The CPU kernels that undo broadcasts and reductions, as gradients: "reduce_sum_to" (dy summed
// down to a shape that broadcasts to it) and "broadcast_to" (x broadcast to the output's shape,
// scaled), and their shape checks (ReduceSumToAlignment, BroadcastToAlignment), which the CUDA
// kernels share. RegisterCpuGradientKernels registers them.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "reduce_sum_to"(dy) -> dx: float32, the inverse of NumPy broadcasting. The output's shape must
// broadcast to the input's (trailing dimensions aligned, each output dimension equal to the
// input's or 1); dy is summed over its leading axes that dx lacks and over the axes where dx has a
// dimension of 1 (kept as 1), in double. The gradient of a broadcasting "add" or "multiply" (after
// the multiply by the other operand) and of "bias_add" with respect to the broadcast operand.
absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceSumToKernel(const KernelInit& init);

// "broadcast_to"(x) -> y: float32, x broadcast to the output's shape, times attribute "scale"
// (float, finite, default 1). The gradient of "reduce_sum" ("reduce_mean" with scale 1 / count).
//   Without attribute "axes" (or with an empty list): NumPy broadcasting; x's shape must broadcast
//     to y's (the gradient of a reduction with keep_dims=true or over all axes).
//   With "axes" (int list, each in [-rank(y), rank(y)), no axis twice): the axes of y that x
//     lacks, i.e. the forward's reduced axes; x's shape must be y's with those axes removed (as
//     keep_dims=false leaves it) or set to 1 (as keep_dims=true leaves it).
absl::StatusOr<std::unique_ptr<Kernel>> CreateBroadcastToKernel(const KernelInit& init);

// The shape checks of the two factories above, without their data-type checks (the CUDA kernels
// share them; the caller checks one input and one output first). INVALID_ARGUMENT with the
// kernels' messages.
// reduce_sum_to: the output's shape aligned to the input's rank (leading 1s).
absl::StatusOr<std::vector<int64_t>> ReduceSumToAlignment(const KernelInit& init);
// broadcast_to: the input's shape aligned to the output's rank (1 on the broadcast axes), and the
// "scale" attribute.
struct BroadcastToShape {
  std::vector<int64_t> aligned;
  float scale = 1;
};
absl::StatusOr<BroadcastToShape> BroadcastToAlignment(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_GRADIENTS_BROADCAST_GRAD_KERNELS_H_
