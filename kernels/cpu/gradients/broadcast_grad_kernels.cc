#include "kernels/cpu/gradients/broadcast_grad_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/vector_math.h"

namespace loom::cpu {
namespace {

constexpr char kReduceSumTo[] = "reduce_sum_to";
constexpr char kBroadcastTo[] = "broadcast_to";

// How to walk a large tensor contiguously together with the small tensor that broadcasts to it,
// planned once: axes of size 1 are dropped and neighbouring axes merged where the small tensor's
// strides allow it. Along each axis, the small tensor's stride is 0 where it is broadcast.
struct BroadcastPlan {
  // Outermost first; never empty.
  absl::InlinedVector<int64_t, 6> dimensions;
  absl::InlinedVector<int64_t, 6> large_strides;
  absl::InlinedVector<int64_t, 6> small_strides;

  // `aligned` is the small tensor's shape aligned to `large` (same rank, 1 where it is broadcast
  // or lacks the axis); each of its dimensions is 1 or `large`'s.
  static BroadcastPlan Make(const Shape& large, const std::vector<int64_t>& aligned) {
    const int rank = large.rank();
    std::vector<int64_t> strides(rank, 0);
    int64_t stride = 1;
    for (int axis = rank - 1; axis >= 0; --axis) {
      strides[axis] = aligned[axis] == 1 ? 0 : stride;
      stride *= aligned[axis];
    }
    BroadcastPlan plan;
    for (int axis = 0; axis < rank; ++axis) {
      const int64_t dimension = large.dimension(axis);
      if (dimension == 1) continue;
      // The large tensor is contiguous, so only the small one decides whether stepping the outer
      // axis once is the same as stepping this one `dimension` times.
      if (!plan.dimensions.empty() && plan.small_strides.back() == strides[axis] * dimension) {
        plan.dimensions.back() *= dimension;
        plan.small_strides.back() = strides[axis];
        continue;
      }
      plan.dimensions.push_back(dimension);
      plan.small_strides.push_back(strides[axis]);
    }
    if (plan.dimensions.empty()) {
      plan.dimensions.push_back(1);
      plan.small_strides.push_back(0);
    }
    plan.large_strides.assign(plan.dimensions.size(), 1);
    for (size_t axis = plan.dimensions.size() - 1; axis-- > 0;) {
      plan.large_strides[axis] = plan.large_strides[axis + 1] * plan.dimensions[axis + 1];
    }
    return plan;
  }
};

// Adds the elements of `large` from axis `axis` inwards into `sums` (small-tensor positions).
void Accumulate(const BroadcastPlan& plan, size_t axis, const float* large, double* sums) {
  const int64_t dimension = plan.dimensions[axis];
  const int64_t small_stride = plan.small_strides[axis];
  if (axis + 1 == plan.dimensions.size()) {
    if (small_stride == 0) {
      double sum = 0.0;
      for (int64_t i = 0; i < dimension; ++i) sum += large[i];
      *sums += sum;
    } else {
      for (int64_t i = 0; i < dimension; ++i) sums[i * small_stride] += large[i];
    }
    return;
  }
  const int64_t large_stride = plan.large_strides[axis];
  for (int64_t i = 0; i < dimension; ++i) {
    Accumulate(plan, axis + 1, large + i * large_stride, sums + i * small_stride);
  }
}

// Columns of one tile of the row-sum below: its float and double accumulators stay in L1.
constexpr int64_t kColumnTile = 512;
// Rows summed in float before the partial sum is added to the double one.
constexpr int64_t kFloatRows = 16;

// sums[j] = sum over the `rows` rows of the row-major [rows, columns] `large` of large[row, j]:
// the bias gradient and the batch sum of a batched weight gradient. Blocks of kFloatRows rows are
// summed in float (vectorised), the blocks' sums in double.
LOOM_VECTORIZED_LOOP void SumRows(const float* large, int64_t rows, int64_t columns, double* sums) {
  float partial[kColumnTile];
  for (int64_t first_column = 0; first_column < columns; first_column += kColumnTile) {
    const int64_t width = std::min(kColumnTile, columns - first_column);
    double* tile_sums = sums + first_column;
    for (int64_t j = 0; j < width; ++j) tile_sums[j] = 0.0;
    for (int64_t first_row = 0; first_row < rows; first_row += kFloatRows) {
      const int64_t last_row = std::min(rows, first_row + kFloatRows);
      const float* row = large + first_row * columns + first_column;
      for (int64_t j = 0; j < width; ++j) partial[j] = row[j];
      for (int64_t index = first_row + 1; index < last_row; ++index) {
        row += columns;
        for (int64_t j = 0; j < width; ++j) partial[j] += row[j];
      }
      for (int64_t j = 0; j < width; ++j) tile_sums[j] += partial[j];
    }
  }
}

// Writes `small` times `scale` to `large` from axis `axis` inwards.
void Broadcast(const BroadcastPlan& plan, size_t axis, const float* small, float scale,
               float* large) {
  const int64_t dimension = plan.dimensions[axis];
  const int64_t small_stride = plan.small_strides[axis];
  if (axis + 1 == plan.dimensions.size()) {
    if (small_stride == 0) {
      std::fill(large, large + dimension, *small * scale);
    } else if (small_stride == 1) {
      for (int64_t i = 0; i < dimension; ++i) large[i] = small[i] * scale;
    } else {
      for (int64_t i = 0; i < dimension; ++i) large[i] = small[i * small_stride] * scale;
    }
    return;
  }
  const int64_t large_stride = plan.large_strides[axis];
  for (int64_t i = 0; i < dimension; ++i) {
    Broadcast(plan, axis + 1, small + i * small_stride, scale, large + i * large_stride);
  }
}

class ReduceSumToKernel : public Kernel {
 public:
  ReduceSumToKernel(const KernelInit& init, BroadcastPlan plan)
      : signature_(init),
        plan_(std::move(plan)),
        sums_(Shape::FromProto(init.outputs[0]).NumElements()) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kReduceSumTo, context);
    if (!status.ok()) return status;
    const float* input = context.inputs[0].Data<const float>();
    if (context.inputs[0].NumElements() == 0) {
      std::fill(sums_.begin(), sums_.end(), 0.0);
    } else if (plan_.dimensions.size() == 2 && plan_.small_strides[0] == 0 &&
               plan_.small_strides[1] == 1) {
      // The output is the input's rows summed.
      SumRows(input, plan_.dimensions[0], plan_.dimensions[1], sums_.data());
    } else {
      std::fill(sums_.begin(), sums_.end(), 0.0);
      Accumulate(plan_, 0, input, sums_.data());
    }
    float* output = context.outputs[0].Data<float>();
    for (size_t i = 0; i < sums_.size(); ++i) output[i] = static_cast<float>(sums_[i]);
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  BroadcastPlan plan_;
  // Scratch: one double accumulator per output element.
  std::vector<double> sums_;
};

class BroadcastToKernel : public Kernel {
 public:
  BroadcastToKernel(const KernelInit& init, BroadcastPlan plan, float scale)
      : signature_(init), plan_(std::move(plan)), scale_(scale) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kBroadcastTo, context);
    if (!status.ok()) return status;
    if (context.outputs[0].NumElements() == 0) return absl::OkStatus();
    Broadcast(plan_, 0, context.inputs[0].Data<const float>(), scale_,
              context.outputs[0].Data<float>());
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  BroadcastPlan plan_;
  float scale_;
};

// `small` aligned to `large` under NumPy broadcasting (leading 1s where it has fewer axes), or
// an error naming both tensors when `small` does not broadcast to `large`.
absl::StatusOr<std::vector<int64_t>> AlignForBroadcast(const char* op_type,
                                                       absl::string_view small_name,
                                                       const Shape& small,
                                                       absl::string_view large_name,
                                                       const Shape& large) {
  const int rank = large.rank();
  if (small.rank() > rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type, ": ", small_name, " has shape ", small.ToString(), " which does not broadcast to ",
        large_name, " ", large.ToString(), " (rank ", small.rank(), " > ", rank, ")"));
  }
  std::vector<int64_t> aligned(rank, 1);
  const int leading = rank - small.rank();
  for (int axis = leading; axis < rank; ++axis) {
    const int64_t dimension = small.dimension(axis - leading);
    if (dimension != 1 && dimension != large.dimension(axis)) {
      return absl::InvalidArgumentError(absl::StrCat(
          op_type, ": ", small_name, " has shape ", small.ToString(),
          " which does not broadcast to ", large_name, " ", large.ToString(), " (", dimension,
          " vs ", large.dimension(axis), " at axis ", axis, " of ", large_name, ")"));
    }
    aligned[axis] = dimension;
  }
  return aligned;
}

// One float32 input and one float32 output.
absl::Status CheckUnaryFloat(const char* op_type, const KernelInit& init) {
  absl::Status status = CheckArity(op_type, init, 1, 1);
  if (!status.ok()) return status;
  return CheckAllFloat32(op_type, init);
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ReduceSumToAlignment(const KernelInit& init) {
  return AlignForBroadcast(kReduceSumTo, "output 'dx'", Shape::FromProto(init.outputs[0]),
                           "input 'dy'", Shape::FromProto(init.inputs[0]));
}

absl::StatusOr<BroadcastToShape> BroadcastToAlignment(const KernelInit& init) {
  const Shape input = Shape::FromProto(init.inputs[0]);
  const Shape output = Shape::FromProto(init.outputs[0]);
  const int rank = output.rank();
  Attributes attributes(*init.conf);

  std::vector<int64_t> axes;
  if (attributes.Has("axes")) {
    absl::StatusOr<std::vector<int64_t>> listed = attributes.GetIntList("axes");
    if (!listed.ok()) return WithOpType(kBroadcastTo, listed.status());
    axes = *std::move(listed);
  }
  std::vector<int64_t> aligned;
  if (axes.empty()) {
    absl::StatusOr<std::vector<int64_t>> numpy =
        AlignForBroadcast(kBroadcastTo, "input 'x'", input, "output 'y'", output);
    if (!numpy.ok()) return numpy.status();
    aligned = *std::move(numpy);
  } else {
    std::vector<bool> missing(rank, false);
    for (int64_t axis : axes) {
      if (axis < -rank || axis >= rank) {
        return absl::InvalidArgumentError(
            absl::StrCat(kBroadcastTo, ": attribute 'axes' [", absl::StrJoin(axes, ", "),
                         "] has axis ", axis, " outside output 'y' ", output.ToString()));
      }
      const int64_t normalized = axis < 0 ? axis + rank : axis;
      if (missing[normalized]) {
        return absl::InvalidArgumentError(absl::StrCat(kBroadcastTo, ": attribute 'axes' [",
                                                       absl::StrJoin(axes, ", "), "] names axis ",
                                                       normalized, " twice"));
      }
      missing[normalized] = true;
    }
    std::vector<int64_t> removed;
    aligned.assign(output.dimensions().begin(), output.dimensions().end());
    for (int axis = 0; axis < rank; ++axis) {
      if (missing[axis]) {
        aligned[axis] = 1;
      } else {
        removed.push_back(output.dimension(axis));
      }
    }
    if (input != Shape(removed) && input != Shape(aligned)) {
      return absl::InvalidArgumentError(absl::StrCat(
          kBroadcastTo, ": input 'x' has shape ", input.ToString(), " but output 'y' ",
          output.ToString(), " without axes [", absl::StrJoin(axes, ", "), "] is ",
          Shape(removed).ToString(), " (or ", Shape(aligned).ToString(), " keeping them as 1)"));
    }
  }

  absl::StatusOr<double> scale = attributes.GetFloat("scale", 1.0);
  if (!scale.ok()) return WithOpType(kBroadcastTo, scale.status());
  if (!std::isfinite(*scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kBroadcastTo, ": attribute 'scale' must be finite, got ", *scale));
  }
  return BroadcastToShape{std::move(aligned), static_cast<float>(*scale)};
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceSumToKernel(const KernelInit& init) {
  absl::Status status = CheckUnaryFloat(kReduceSumTo, init);
  if (!status.ok()) return status;
  absl::StatusOr<std::vector<int64_t>> aligned = ReduceSumToAlignment(init);
  if (!aligned.ok()) return aligned.status();
  return std::make_unique<ReduceSumToKernel>(
      init, BroadcastPlan::Make(Shape::FromProto(init.inputs[0]), *aligned));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateBroadcastToKernel(const KernelInit& init) {
  absl::Status status = CheckUnaryFloat(kBroadcastTo, init);
  if (!status.ok()) return status;
  absl::StatusOr<BroadcastToShape> shape = BroadcastToAlignment(init);
  if (!shape.ok()) return shape.status();
  return std::make_unique<BroadcastToKernel>(
      init, BroadcastPlan::Make(Shape::FromProto(init.outputs[0]), shape->aligned), shape->scale);
}

}  // namespace loom::cpu
