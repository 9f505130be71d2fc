#ifndef LOOM_KERNELS_CPU_LAYOUT_KERNELS_H_
#define LOOM_KERNELS_CPU_LAYOUT_KERNELS_H_

// The CPU kernels that move elements without looking at their values: "reshape", "transpose",
// "slice", "pad" and "concat", for any data type with a size, the strided copies planned by
// CopyPlan (kernels/copy_plan.h). RegisterCpuKernels registers them; the CUDA layout kernels check
// their configurations with these factories.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// Kernels that move elements without looking at their values. Every one accepts any data type
// with a size (float32, int32, int64, uint8, uint16, bfloat16); inputs and output share it.

// "reshape": one input, one output with the same number of elements; the bytes are copied.
absl::StatusOr<std::unique_ptr<Kernel>> CreateReshapeKernel(const KernelInit& init);

// "transpose": attribute "permutation" (int list, required): a permutation of [0, rank). Output
// axis i is input axis permutation[i], so the output shape is the input shape permuted.
absl::StatusOr<std::unique_ptr<Kernel>> CreateTransposeKernel(const KernelInit& init);

// "slice": attributes "begin" and "end" (int lists, required, one entry per axis, with
// 0 <= begin <= end <= the input dimension); the output is input[begin:end], of shape end - begin.
absl::StatusOr<std::unique_ptr<Kernel>> CreateSliceKernel(const KernelInit& init);

// "pad": the inverse of slice into zeros. Attribute "begin" (int list, required, one entry per
// axis); the output shape comes from the output register. The output is zero everywhere except
// output[begin : begin + input shape] = input, which must lie inside the output.
absl::StatusOr<std::unique_ptr<Kernel>> CreatePadKernel(const KernelInit& init);

// "concat": one or more inputs of one rank, concatenated along attribute "axis" (int, required,
// in [-rank, rank); negative counts from the end). All other dimensions must agree.
absl::StatusOr<std::unique_ptr<Kernel>> CreateConcatKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_LAYOUT_KERNELS_H_
