#ifndef LOOM_KERNELS_CPU_DATA_SAFETENSORS_SLICE_KERNEL_H_
#define LOOM_KERNELS_CPU_DATA_SAFETENSORS_SLICE_KERNEL_H_

// The CPU kernel of "safetensors_slice" (CreateSafetensorsSliceKernel): a source that outputs this
// task's window of one tensor of a safetensors checkpoint (a variable's value or an optimizer state
// when a job starts from a checkpoint), read once through SafetensorsReader when the kernel is
// built. The CUDA host-staged kernel runs it and copies the window to the GPU.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom::cpu {

// "safetensors_slice": no inputs; one output (any data type safetensors and Loom share) holding
// this task's window of a tensor of a safetensors checkpoint: a variable's value or an optimizer
// state when a job starts from a checkpoint.
//
// Attributes:
//   "path" (string, required): the safetensors file;
//   "tensor" (string, required): the tensor's name in the file;
//   "logical_shape" (int list, required): the tensor's whole (logical) shape, of the output's rank;
//   "slice_begin" (int list, default all zeros): the output is the window
//     [slice_begin, slice_begin + output shape) of the tensor.
//
// The file is opened through KernelInit::files (null: no file may be opened, PERMISSION_DENIED;
// not beneath a root: PERMISSION_DENIED naming the path and the roots). The window is read when
// the kernel is built, and only it is kept; building fails, naming the path and the tensor, when
// the file cannot be read or is malformed, has no such tensor, or the
// tensor's dtype is not the output's data type, its shape is not logical_shape, or the window
// does not lie inside it. Compute copies the window into the output for every piece.
absl::StatusOr<std::unique_ptr<Kernel>> CreateSafetensorsSliceKernel(const KernelInit& init);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_DATA_SAFETENSORS_SLICE_KERNEL_H_
