#ifndef LOOM_KERNELS_FLAT_PACK_KERNELS_H_
#define LOOM_KERNELS_FLAT_PACK_KERNELS_H_

// The kernels of buckets, "pack_flat", "unpack_flat", "pack_shards" and "unpack_shards": byte
// copies on the task's stream that pack several tensors into one flat tensor and back. One
// implementation serves every device type; RegisterCpuKernels and RegisterCudaKernels both register
// it.

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
//   "pack_shards": as pack_flat, but with int attribute "shards" = N (>= 1) and every input's axis
//                  0 divisible by N: shard 0 of every input (its first N-th along axis 0), then
//                  shard 1 of every input, and so on; a reduce-scatter of it over N ranks leaves
//                  rank r its shard r of every input, one after the other (ZeRO's buckets).
//   "unpack_shards": its inverse: what an all-gather over N ranks of each rank's shards packed with
//                  pack_flat makes, unpacked into each whole tensor (ZeRO's parameter buckets).
// INVALID_ARGUMENT naming the task when the element counts, data types or shards do not add up.
absl::StatusOr<std::unique_ptr<Kernel>> CreatePackFlatKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreateUnpackFlatKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreatePackShardsKernel(const KernelInit& init);
absl::StatusOr<std::unique_ptr<Kernel>> CreateUnpackShardsKernel(const KernelInit& init);

}  // namespace loom

#endif  // LOOM_KERNELS_FLAT_PACK_KERNELS_H_
