#ifndef LOOM_KERNELS_CPU_FILL_KERNEL_H_
#define LOOM_KERNELS_CPU_FILL_KERNEL_H_

// The CPU kernel of "fill" (CreateFillKernel): a source with no inputs whose float32, int32 or
// int64 output holds one value everywhere (attribute "value", or "int_value" exactly).
// RegisterCpuKernels registers it.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "fill": no inputs and one output (float32, int32 or int64) whose every element is the attribute
// "value" (a number, default 0). For an integer output the value must be a whole number in the
// type's range; an int_value attribute is used exactly (no rounding through double).
absl::StatusOr<std::unique_ptr<Kernel>> CreateFillKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_FILL_KERNEL_H_
