#ifndef LOOM_KERNELS_CPU_BINARY_KERNELS_H_
#define LOOM_KERNELS_CPU_BINARY_KERNELS_H_

// The CPU kernels of the element-wise binary ops "add", "subtract", "multiply" and "divide":
// float32, with NumPy broadcasting: BroadcastShapes (broadcast.h) gives the output's shape and
// BroadcastIteration the walk over it, planned once when the kernel is built. RegisterCpuKernels
// registers them.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// Element-wise float32 ops on two inputs a, b with NumPy broadcasting; the output has the
// broadcast shape. "add": a + b, "subtract": a - b, "multiply": a * b, "divide": a / b (IEEE: a
// division by zero gives an infinity or NaN, no error).
absl::StatusOr<std::unique_ptr<Kernel>> CreateAddKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreateSubtractKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreateMultiplyKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreateDivideKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_BINARY_KERNELS_H_
