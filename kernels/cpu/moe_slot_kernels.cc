#include "kernels/cpu/moe_slot_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kDispatch[] = "moe_dispatch";
constexpr char kCombine[] = "moe_combine";
constexpr char kDispatchGrad[] = "moe_dispatch_grad";

// The extents shared by the three kernels.
struct SlotShape {
  int64_t groups = 0, tokens = 0, experts = 0, capacity = 0, width = 0;
};

absl::Status BadSlot(const char* op_type, int64_t slot, const SlotShape& shape, int64_t token) {
  const int64_t c = slot % shape.capacity;
  const int64_t e = (slot / shape.capacity) % shape.experts;
  const int64_t b = slot / (shape.capacity * shape.experts);
  return absl::InvalidArgumentError(
      absl::StrCat(op_type, ": slot_token[", b, ", ", e, ", ", c, "] = ", token,
                   " is not a token of the group (0 to ", shape.tokens - 1, ") or -1"));
}

// tokens [B, T, W] and slots [B, E, C, W] with slot_token [B, E, C]: checks types and shapes.
absl::StatusOr<SlotShape> CheckSlotShapes(const char* op_type, const plan::TensorDesc& tokens_desc,
                                          const plan::TensorDesc& slots_desc,
                                          const plan::TensorDesc& slot_token_desc) {
  for (const plan::TensorDesc* desc : {&tokens_desc, &slots_desc}) {
    if (absl::Status status = CheckDataType(op_type, DescribeTensor(*desc), *desc, plan::FLOAT32);
        !status.ok()) {
      return status;
    }
  }
  if (absl::Status status =
          CheckDataType(op_type, "input 'slot_token'", slot_token_desc, plan::INT32);
      !status.ok()) {
    return status;
  }
  const Shape tokens = Shape::FromProto(tokens_desc);
  const Shape slots = Shape::FromProto(slots_desc);
  const Shape slot_token = Shape::FromProto(slot_token_desc);
  if (tokens.rank() != 3 || slots.rank() != 4 || slot_token.rank() != 3 ||
      slots.dimension(0) != tokens.dimension(0) || slots.dimension(3) != tokens.dimension(2) ||
      slot_token != Shape({slots.dimension(0), slots.dimension(1), slots.dimension(2)})) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type, ": tokens [B, T, W] ", DescribeTensor(tokens_desc), ", slots [B, E, C, W] ",
        DescribeTensor(slots_desc), " and slot_token [B, E, C] ", DescribeTensor(slot_token_desc),
        " do not match"));
  }
  return SlotShape{tokens.dimension(0), tokens.dimension(1), slots.dimension(1), slots.dimension(2),
                   tokens.dimension(2)};
}

class MoeDispatchKernel final : public Kernel {
 public:
  MoeDispatchKernel(const KernelInit& init, SlotShape shape) : signature_(init), shape_(shape) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kDispatch, context); !status.ok()) return status;
    const float* x = context.inputs[0].Data<const float>();
    const int32_t* slot_token = context.inputs[1].Data<const int32_t>();
    float* out = context.outputs[0].Data<float>();
    const int64_t slots_per_group = shape_.experts * shape_.capacity;
    const int64_t width = shape_.width;
    for (int64_t slot = 0; slot < shape_.groups * slots_per_group; ++slot) {
      const int64_t t = slot_token[slot];
      float* row = out + slot * width;
      if (t == -1) {
        std::fill(row, row + width, 0.0f);
        continue;
      }
      if (t < -1 || t >= shape_.tokens) return BadSlot(kDispatch, slot, shape_, t);
      const int64_t b = slot / slots_per_group;
      if (width > 0) std::memcpy(row, x + (b * shape_.tokens + t) * width, width * sizeof(float));
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  SlotShape shape_;
};

// moe_combine (with weights) and moe_dispatch_grad (without).
class MoeScatterKernel final : public Kernel {
 public:
  MoeScatterKernel(const KernelInit& init, const char* op_type, SlotShape shape, bool weighted)
      : signature_(init), op_type_(op_type), shape_(shape), weighted_(weighted) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(op_type_, context); !status.ok()) return status;
    const float* rows = context.inputs[0].Data<const float>();
    const int32_t* slot_token = context.inputs[1].Data<const int32_t>();
    const float* weights = weighted_ ? context.inputs[2].Data<const float>() : nullptr;
    float* y = context.outputs[0].Data<float>();
    const int64_t width = shape_.width;
    std::fill(y, y + shape_.groups * shape_.tokens * width, 0.0f);
    const int64_t slots_per_group = shape_.experts * shape_.capacity;
    for (int64_t slot = 0; slot < shape_.groups * slots_per_group; ++slot) {
      const int64_t t = slot_token[slot];
      if (t == -1) continue;
      if (t < -1 || t >= shape_.tokens) return BadSlot(op_type_, slot, shape_, t);
      const int64_t b = slot / slots_per_group;
      const float weight = weighted_ ? weights[slot] : 1.0f;
      const float* row = rows + slot * width;
      float* target = y + (b * shape_.tokens + t) * width;
      for (int64_t i = 0; i < width; ++i) target[i] += weight * row[i];
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  const char* op_type_;
  SlotShape shape_;
  bool weighted_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateScatterKernel(const KernelInit& init,
                                                            const char* op_type, bool weighted) {
  if (absl::Status status = CheckArity(op_type, init, weighted ? 3 : 2, 1); !status.ok()) {
    return status;
  }
  absl::StatusOr<SlotShape> shape =
      CheckSlotShapes(op_type, init.outputs[0], init.inputs[0], init.inputs[1]);
  if (!shape.ok()) return shape.status();
  if (weighted) {
    if (absl::Status status =
            CheckDataType(op_type, "input 'slot_weight'", init.inputs[2], plan::FLOAT32);
        !status.ok()) {
      return status;
    }
    if (absl::Status status =
            CheckSameShape(op_type, "input 'slot_token'", Shape::FromProto(init.inputs[1]),
                           "input 'slot_weight'", Shape::FromProto(init.inputs[2]));
        !status.ok()) {
      return status;
    }
  }
  return std::make_unique<MoeScatterKernel>(init, op_type, *shape, weighted);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeDispatchKernel(const KernelInit& init) {
  if (absl::Status status = CheckArity(kDispatch, init, 2, 1); !status.ok()) return status;
  absl::StatusOr<SlotShape> shape =
      CheckSlotShapes(kDispatch, init.inputs[0], init.outputs[0], init.inputs[1]);
  if (!shape.ok()) return shape.status();
  return std::make_unique<MoeDispatchKernel>(init, *shape);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeCombineKernel(const KernelInit& init) {
  return CreateScatterKernel(init, kCombine, /*weighted=*/true);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMoeDispatchGradKernel(const KernelInit& init) {
  return CreateScatterKernel(init, kDispatchGrad, /*weighted=*/false);
}

}  // namespace loom::cpu
