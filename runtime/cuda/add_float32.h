#ifndef LOOM_RUNTIME_CUDA_ADD_FLOAT32_H_
#define LOOM_RUNTIME_CUDA_ADD_FLOAT32_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace loom::cuda {

// Enqueues sum[i] += values[i] for i < count (float32, GPU memory) on `stream`; returns the
// launch's error.
cudaError_t LaunchAddFloat32(float* sum, const float* values, int64_t count, cudaStream_t stream);

}  // namespace loom::cuda

#endif  // LOOM_RUNTIME_CUDA_ADD_FLOAT32_H_
