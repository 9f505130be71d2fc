#ifndef LOOM_KERNELS_CPU_IDENTITY_KERNEL_H_
#define LOOM_KERNELS_CPU_IDENTITY_KERNEL_H_

// The CPU kernel of "identity" (CreateIdentityKernel): its one input copied byte for byte to its
// one output of the same data type and shape, so any data type is accepted. RegisterCpuKernels
// registers it.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "identity": copies its one input to its one output, which has the same data type and shape.
// A byte copy, so any data type is accepted.
absl::StatusOr<std::unique_ptr<Kernel>> CreateIdentityKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_IDENTITY_KERNEL_H_
