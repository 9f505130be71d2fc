#ifndef LOOM_KERNELS_CPU_REDUCE_KERNELS_H_
#define LOOM_KERNELS_CPU_REDUCE_KERNELS_H_

// The CPU kernels of the float32 reductions "reduce_sum" and "reduce_mean" over some axes of their
// input (attributes "axes", "keep_dims", and "divisor" for reduce_mean), summed in double.
// RegisterCpuKernels registers them; the CUDA reduce kernels check their configurations with these
// factories.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// Float32 reductions of one input over some of its axes. Attributes:
//   "axes" (int list, default all): the axes reduced, each in [-rank, rank) (negative counts from
//     the end), no axis twice; an empty list also means all axes;
//   "keep_dims" (bool, default false): reduced axes stay as dimensions of 1 instead of being
//     removed.
// Sums are accumulated in double.

// "reduce_sum".
absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceSumKernel(const KernelInit& init);

// "reduce_mean": the sum divided by attribute "divisor" (float > 0) when given, else by the number
// of elements reduced into each output element (the compiler passes the logical count when the
// input is a slice of a larger tensor).
absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceMeanKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_REDUCE_KERNELS_H_
