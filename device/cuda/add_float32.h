#ifndef LOOM_DEVICE_CUDA_ADD_FLOAT32_H_
#define LOOM_DEVICE_CUDA_ADD_FLOAT32_H_

// LaunchAddFloat32: the CUDA kernel launch behind CudaStreamContext::AddFloat32 (sum += values in
// float32, in stream order), with which a GPU accumulates gradients over micro-batches. Defined in
// add_float32.cu.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace loom::cuda {

// Enqueues sum[i] += values[i] for i < count (float32, GPU memory) on `stream`; returns the
// launch's error.
cudaError_t LaunchAddFloat32(float* sum, const float* values, int64_t count, cudaStream_t stream);

}  // namespace loom::cuda

#endif  // LOOM_DEVICE_CUDA_ADD_FLOAT32_H_
