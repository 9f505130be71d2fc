#include "kernels/cpu/causal_attention_settings.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {

absl::StatusOr<CausalAttentionSettings> ReadCausalAttentionSettings(
    absl::string_view op_type, const KernelInit& init, absl::Span<const char* const> tensor_names,
    absl::string_view q_name) {
  std::vector<const plan::TensorDesc*> descs;
  for (const plan::TensorDesc& input : init.inputs) descs.push_back(&input);
  for (const plan::TensorDesc& output : init.outputs) descs.push_back(&output);
  const plan::DataType data_type =
      init.inputs[0].data_type() == plan::BFLOAT16 ? plan::BFLOAT16 : plan::FLOAT32;
  for (size_t index = 0; index < descs.size(); ++index) {
    absl::Status status = CheckDataType(op_type, tensor_names[index], *descs[index], data_type);
    if (!status.ok()) return status;
  }
  const Shape q = Shape::FromProto(init.inputs[0]);
  if (q.rank() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": q must have rank 4 [B, H, T, Dh], got ", q.ToString()));
  }
  for (size_t index = 1; index < descs.size(); ++index) {
    absl::Status status =
        CheckSameShape(op_type, q_name, q, tensor_names[index], Shape::FromProto(*descs[index]));
    if (!status.ok()) return status;
  }
  const int64_t length = q.dimension(2);
  const int64_t head_size = q.dimension(3);
  if (length > std::numeric_limits<int>::max() || head_size > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(op_type, ": q ", q.ToString(),
                                                   " exceeds what BLAS can index (",
                                                   std::numeric_limits<int>::max(), ")"));
  }
  double default_scale = head_size > 0 ? 1.0 / std::sqrt(static_cast<double>(head_size)) : 1.0;
  absl::StatusOr<double> scale = Attributes(*init.conf).GetFloat("scale", default_scale);
  if (!scale.ok()) return WithOpType(op_type, scale.status());
  if (!std::isfinite(*scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute 'scale' must be finite, got ", *scale));
  }
  CausalAttentionSettings settings;
  settings.heads = q.dimension(0) * q.dimension(1);
  settings.length = length;
  settings.head_size = head_size;
  settings.scale = static_cast<float>(*scale);
  settings.data_type = data_type;
  return settings;
}

}  // namespace loom::cpu
