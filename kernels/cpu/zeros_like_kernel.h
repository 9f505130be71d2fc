#ifndef LOOM_KERNELS_CPU_ZEROS_LIKE_KERNEL_H_
#define LOOM_KERNELS_CPU_ZEROS_LIKE_KERNEL_H_

// The CPU kernel of "zeros_like" (CreateZerosLikeKernel): a tensor of zeros of its input's data
// type and shape, for any data type, which boxing uses for B -> P on every rank of a group but the
// first. RegisterCpuKernels registers it.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "zeros_like": one input (only its arrival matters), one output of the same data type and shape
// filled with zeros. Boxing uses it for B -> P on every rank but the first of a group. Any data
// type.
absl::StatusOr<std::unique_ptr<Kernel>> CreateZerosLikeKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_ZEROS_LIKE_KERNEL_H_
