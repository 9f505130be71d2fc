#include "kernels/cpu/attention_heads.h"

#include "kernels/cpu/cast_kernel.h"

namespace loom::cpu {

const float* HeadAsFloat32(const TensorView& tensor, int64_t offset, int64_t count,
                           std::vector<float>& scratch) {
  if (tensor.data_type != plan::BFLOAT16) return tensor.Data<const float>() + offset;
  scratch.resize(static_cast<size_t>(count));
  const auto* bits = static_cast<const uint16_t*>(tensor.data) + offset;
  for (int64_t i = 0; i < count; ++i) scratch[i] = Bfloat16ToFloat32(bits[i]);
  return scratch.data();
}

float* HeadOutput(const TensorView& tensor, int64_t offset, int64_t count,
                  std::vector<float>& scratch) {
  if (tensor.data_type != plan::BFLOAT16) return tensor.Data<float>() + offset;
  scratch.resize(static_cast<size_t>(count));
  return scratch.data();
}

void StoreHead(const std::vector<float>& scratch, const TensorView& tensor, int64_t offset,
               int64_t count) {
  if (tensor.data_type != plan::BFLOAT16) return;
  auto* bits = static_cast<uint16_t*>(tensor.data) + offset;
  for (int64_t i = 0; i < count; ++i) bits[i] = Float32ToBfloat16(scratch[i]);
}

void RoundToBfloat16(float* values, int64_t count) {
  for (int64_t i = 0; i < count; ++i) values[i] = Bfloat16ToFloat32(Float32ToBfloat16(values[i]));
}

}  // namespace loom::cpu
