#include "kernels/cpu/binary_kernels.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

struct AddOperation {
  static constexpr char kOpType[] = "add";
  float operator()(float a, float b) const { return a + b; }
};

struct SubtractOperation {
  static constexpr char kOpType[] = "subtract";
  float operator()(float a, float b) const { return a - b; }
};

struct MultiplyOperation {
  static constexpr char kOpType[] = "multiply";
  float operator()(float a, float b) const { return a * b; }
};

struct DivideOperation {
  static constexpr char kOpType[] = "divide";
  float operator()(float a, float b) const { return a / b; }
};

// output[i] = operation(a[i * a_stride], b[i * b_stride]) for i < count, each stride 0 or 1. The
// four stride combinations are separate loops so that the compiler vectorises each.
template <typename Operation>
void InnerLoop(Operation operation, const float* a, int64_t a_stride, const float* b,
               int64_t b_stride, float* output, int64_t count) {
  if (a_stride == 1 && b_stride == 1) {
    for (int64_t i = 0; i < count; ++i) output[i] = operation(a[i], b[i]);
  } else if (a_stride == 1) {
    const float b_value = *b;
    for (int64_t i = 0; i < count; ++i) output[i] = operation(a[i], b_value);
  } else if (b_stride == 1) {
    const float a_value = *a;
    for (int64_t i = 0; i < count; ++i) output[i] = operation(a_value, b[i]);
  } else {
    std::fill(output, output + count, operation(*a, *b));
  }
}

template <typename Operation>
class BinaryKernel : public Kernel {
 public:
  BinaryKernel(const KernelInit& init, BroadcastIteration iteration, bool same_shapes)
      : signature_(init),
        iteration_(std::move(iteration)),
        same_shapes_(same_shapes),
        index_(iteration_.dimensions.size(), 0) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(Operation::kOpType, context);
    if (!status.ok()) return status;
    const float* a = context.inputs[0].Data<const float>();
    const float* b = context.inputs[1].Data<const float>();
    float* output = context.outputs[0].Data<float>();
    const int64_t total = context.outputs[0].NumElements();
    if (total == 0) return absl::OkStatus();
    if (same_shapes_) {
      InnerLoop(Operation(), a, 1, b, 1, output, total);
      return absl::OkStatus();
    }
    const int rank = static_cast<int>(iteration_.dimensions.size());
    const int64_t inner = iteration_.dimensions.back();
    const int64_t a_inner_stride = iteration_.a_strides.back();
    const int64_t b_inner_stride = iteration_.b_strides.back();
    std::fill(index_.begin(), index_.end(), 0);
    int64_t a_offset = 0;
    int64_t b_offset = 0;
    for (int64_t start = 0; start < total; start += inner) {
      InnerLoop(Operation(), a + a_offset, a_inner_stride, b + b_offset, b_inner_stride,
                output + start, inner);
      // Step the outer axes like an odometer.
      for (int axis = rank - 2; axis >= 0; --axis) {
        a_offset += iteration_.a_strides[axis];
        b_offset += iteration_.b_strides[axis];
        if (++index_[axis] < iteration_.dimensions[axis]) break;
        a_offset -= iteration_.a_strides[axis] * iteration_.dimensions[axis];
        b_offset -= iteration_.b_strides[axis] * iteration_.dimensions[axis];
        index_[axis] = 0;
      }
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  BroadcastIteration iteration_;
  bool same_shapes_;
  // Scratch: the position in the outer axes.
  std::vector<int64_t> index_;
};

template <typename Operation>
absl::StatusOr<std::unique_ptr<Kernel>> CreateBinaryKernel(const KernelInit& init) {
  constexpr const char* op_type = Operation::kOpType;
  absl::Status status = CheckArity(op_type, init, 2, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(op_type, init);
  if (!status.ok()) return status;
  const Shape a = Shape::FromProto(init.inputs[0]);
  const Shape b = Shape::FromProto(init.inputs[1]);
  const Shape output = Shape::FromProto(init.outputs[0]);
  absl::StatusOr<Shape> broadcast = BroadcastShapes(a, b);
  if (!broadcast.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(op_type, ": ", broadcast.status().message()));
  }
  if (output != *broadcast) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": output has shape ", output.ToString(), " but ", a.ToString(),
                     " and ", b.ToString(), " broadcast to ", broadcast->ToString()));
  }
  return std::make_unique<BinaryKernel<Operation>>(init, BroadcastIteration::Plan(a, b, output),
                                                   a == b);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateAddKernel(const KernelInit& init) {
  return CreateBinaryKernel<AddOperation>(init);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSubtractKernel(const KernelInit& init) {
  return CreateBinaryKernel<SubtractOperation>(init);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMultiplyKernel(const KernelInit& init) {
  return CreateBinaryKernel<MultiplyOperation>(init);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateDivideKernel(const KernelInit& init) {
  return CreateBinaryKernel<DivideOperation>(init);
}

}  // namespace loom::cpu
