#ifndef LOOM_KERNELS_FLAT_PACK_KERNELS_H_
#define LOOM_KERNELS_FLAT_PACK_KERNELS_H_

// The kernels of gradient buckets, "pack_flat" and "unpack_flat": byte copies on the task's stream
// that pack several tensors into one flat tensor and back. One implementation serves every device
// type; RegisterCpuKernels and RegisterCudaKernels both register it.

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"

namespace loom {

// The kernels of gradient buckets (compiler/lowering.cc): byte copies on the task's stream, so one
// implementation serves every device type (a CPU stream copies with memcpy, a CUDA stream
// enqueues cudaMemcpyAsync).
//   "pack_flat":   inputs x_1..x_n (one data type), output [sum of their element counts]: the
//                  inputs' elements one after the other.
//   "unpack_flat": input [sum of the outputs' element counts], outputs y_1..y_n: the inverse.
// INVALID_ARGUMENT naming the task when the element counts or data types do not add up.
absl::StatusOr<std::unique_ptr<Kernel>> CreatePackFlatKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreateUnpackFlatKernel(const KernelInit& init);

}  // namespace loom

#endif  // LOOM_KERNELS_FLAT_PACK_KERNELS_H_
