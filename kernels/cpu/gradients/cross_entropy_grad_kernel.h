#ifndef LOOM_KERNELS_CPU_GRADIENTS_CROSS_ENTROPY_GRAD_KERNEL_H_
#define LOOM_KERNELS_CPU_GRADIENTS_CROSS_ENTROPY_GRAD_KERNEL_H_

// The CPU kernel of "sparse_cross_entropy_grad" (CreateSparseCrossEntropyGradKernel): the gradient
// of the per-sample cross-entropy with respect to the logits, (softmax - onehot) * dloss per row,
// zero for ignore_index rows. RegisterCpuGradientKernels registers it; the CUDA kernel checks its
// configuration with this factory.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "sparse_cross_entropy_grad": the gradient of "sparse_cross_entropy" with respect to its logits.
// Inputs logits [N..., C] float32, labels [N...] (int32 or int64) and dloss [N...] float32 (the
// gradient of the per-sample loss); output dlogits [N..., C] float32 with
//   dlogits[n, :] = (softmax(logits[n, :]) - onehot(label[n])) * dloss[n],
// the softmax stable with its sum in double. Attribute "ignore_index" (int, default -100): samples
// with that label get a row of zeros. Any other label outside [0, C) fails Compute with
// INVALID_ARGUMENT naming the label and its position in labels.
absl::StatusOr<std::unique_ptr<Kernel>> CreateSparseCrossEntropyGradKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_GRADIENTS_CROSS_ENTROPY_GRAD_KERNEL_H_
