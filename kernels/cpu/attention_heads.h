#ifndef LOOM_KERNELS_CPU_ATTENTION_HEADS_H_
#define LOOM_KERNELS_CPU_ATTENTION_HEADS_H_

// Per-head helpers of the CPU attention kernel and its gradient, which compute in float32 on one
// (batch, head) [T, Dh] matrix at a time: HeadAsFloat32 and HeadOutput widen bfloat16 tensors or
// give scratch for them, StoreHead narrows results back, and RoundToBfloat16 rounds P and dS as the
// CUDA kernels store them.

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace loom::cpu {

// The CPU attention kernels compute in float32 on one (batch, head) [T, Dh] matrix at a time.
// With bfloat16 tensors (mixed precision) they widen each head's inputs, round P and dS to
// bfloat16 where the CUDA kernels store them as bfloat16, and narrow the results: the CUDA
// kernels' arithmetic, in another summation order.

// `count` values of `tensor` (float32 or bfloat16) from element `offset` as float32: the tensor's
// own memory, or `scratch` (resized) holding them widened.
const float* HeadAsFloat32(const TensorView& tensor, int64_t offset, int64_t count,
                           std::vector<float>& scratch);

// Where to compute `count` values of `tensor` from element `offset`: the tensor's own memory
// (float32), or `scratch` (resized) for StoreHead to narrow (bfloat16).
float* HeadOutput(const TensorView& tensor, int64_t offset, int64_t count,
                  std::vector<float>& scratch);

// After HeadOutput: narrows `scratch` into a bfloat16 `tensor` (nothing for float32).
void StoreHead(const std::vector<float>& scratch, const TensorView& tensor, int64_t offset,
               int64_t count);

// Every value rounded to the nearest bfloat16 (and widened back).
void RoundToBfloat16(float* values, int64_t count);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_ATTENTION_HEADS_H_
