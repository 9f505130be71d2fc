#ifndef LOOM_KERNELS_CPU_ONES_LIKE_KERNEL_H_
#define LOOM_KERNELS_CPU_ONES_LIKE_KERNEL_H_

// The CPU kernel of "ones_like" (CreateOnesLikeKernel): a float32 tensor of ones in the shape of
// its input (of any data type), with which autodiff seeds the backward pass. RegisterCpuKernels
// registers it.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "ones_like": one input of any data type (only its shape and arrival matter), one float32
// output of the same shape filled with ones. Autodiff seeds the backward pass with it.
absl::StatusOr<std::unique_ptr<Kernel>> CreateOnesLikeKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_ONES_LIKE_KERNEL_H_
