#ifndef LOOM_KERNELS_CPU_IDENTITY_KERNEL_H_
#define LOOM_KERNELS_CPU_IDENTITY_KERNEL_H_

// The CPU kernels of "identity" (CreateIdentityKernel): its one input copied byte for byte to its
// one output of the same data type and shape, so any data type is accepted; and of
// "identity_after" (CreateIdentityAfterKernel), the same copy of its first input once its other
// inputs, which it does not read, are there; "offload" and "reload" (activation offload), the same
// copy. RegisterCpuKernels registers them.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "identity": copies its one input to its one output, which has the same data type and shape.
// A byte copy, so any data type is accepted.
absl::StatusOr<std::unique_ptr<Kernel>> CreateIdentityKernel(const KernelInit& init);

// "identity_after": (x, after, ...) -> a copy of x. The `after` inputs (at least one, any types
// and shapes) only order the act: recomputation (compiler/recomputation.h) starts from it once
// the backward reaches a block.
absl::StatusOr<std::unique_ptr<Kernel>> CreateIdentityAfterKernel(const KernelInit& init);

// "offload" and "reload": the copy of "identity" into a register in host memory and back out
// of it (compiler/activation_offload.h).
absl::StatusOr<std::unique_ptr<Kernel>> CreateOffloadKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreateReloadKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_IDENTITY_KERNEL_H_
