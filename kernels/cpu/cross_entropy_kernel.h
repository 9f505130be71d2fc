#ifndef LOOM_KERNELS_CPU_CROSS_ENTROPY_KERNEL_H_
#define LOOM_KERNELS_CPU_CROSS_ENTROPY_KERNEL_H_

// The CPU kernel of "sparse_cross_entropy" (CreateSparseCrossEntropyKernel): the per-sample softmax
// cross-entropy of float32 logits against integer class labels, with an ignore_index.
// RegisterCpuKernels registers it; the CUDA kernel checks its configuration with this factory.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "sparse_cross_entropy": per-sample softmax cross-entropy against class indices. Inputs logits
// [N..., C] float32 and labels [N...] (int32 or int64); output loss [N...] float32 with
//   loss = logsumexp(logits[n, :]) - logits[n, label[n]],
// computed stably in double. Attribute "ignore_index" (int, default -100): samples with that label
// give 0. Any other label outside [0, C) fails Compute with INVALID_ARGUMENT naming the label and
// its position in labels.
absl::StatusOr<std::unique_ptr<Kernel>> CreateSparseCrossEntropyKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_CROSS_ENTROPY_KERNEL_H_
