#include "kernels/cpu/cast_kernel.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "cast";

bool Castable(plan::DataType data_type) {
  return data_type == plan::FLOAT32 || data_type == plan::BFLOAT16;
}

class CastKernel : public Kernel {
 public:
  explicit CastKernel(const KernelInit& init) : signature_(init) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kOpType, context); !status.ok()) return status;
    const TensorView& input = context.inputs[0];
    const TensorView& output = context.outputs[0];
    const int64_t count = input.NumElements();
    if (input.data_type == output.data_type) {
      if (input.data != output.data && count > 0) {
        std::memcpy(output.data, input.data, input.ByteSize());
      }
    } else if (input.data_type == plan::FLOAT32) {
      const float* from = input.Data<const float>();
      auto* to = static_cast<uint16_t*>(output.data);
      for (int64_t i = 0; i < count; ++i) to[i] = Float32ToBfloat16(from[i]);
    } else {
      const auto* from = static_cast<const uint16_t*>(input.data);
      float* to = output.Data<float>();
      for (int64_t i = 0; i < count; ++i) to[i] = Bfloat16ToFloat32(from[i]);
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
};

}  // namespace

uint16_t Float32ToBfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float Bfloat16ToFloat32(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

absl::Status CheckCast(const KernelInit& init) {
  if (absl::Status status = CheckArity(kOpType, init, 1, 1); !status.ok()) return status;
  const plan::DataType from = init.inputs[0].data_type();
  const plan::DataType to = init.outputs[0].data_type();
  if (!Castable(from) || !Castable(to)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": casts between float32 and bfloat16, not from ", DataTypeName(from),
                     " to ", DataTypeName(to)));
  }
  return CheckSameShape(kOpType, "input", Shape::FromProto(init.inputs[0]), "output",
                        Shape::FromProto(init.outputs[0]));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateCastKernel(const KernelInit& init) {
  if (absl::Status status = CheckCast(init); !status.ok()) return status;
  return std::make_unique<CastKernel>(init);
}

}  // namespace loom::cpu
