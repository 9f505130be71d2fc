#include "kernels/matmul_dimensions.h"

#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom {
namespace {

constexpr char kOpType[] = "matmul";

std::string Describe(const Shape& shape, const char* transpose_name, bool transpose) {
  return absl::StrCat(shape.ToString(), " (", transpose_name, "=", transpose ? "true" : "false",
                      ")");
}

}  // namespace

bool FitsBlasInt(int64_t value) { return value <= std::numeric_limits<int>::max(); }

absl::StatusOr<MatmulDimensions> CheckMatmul(const KernelInit& init, plan::DataType data_type) {
  absl::Status status = cpu::CheckArity(kOpType, init, 2, 1);
  if (!status.ok()) return status;
  const char* names[] = {"input 'a'", "input 'b'", "output 'c'"};
  const plan::TensorDesc* descs[] = {&init.inputs[0], &init.inputs[1], &init.outputs[0]};
  for (int index = 0; index < 3; ++index) {
    status = cpu::CheckDataType(kOpType, names[index], *descs[index], data_type);
    if (!status.ok()) return status;
  }
  MatmulDimensions dimensions;
  Attributes attributes(*init.conf);
  absl::StatusOr<bool> transpose_a = attributes.GetBool("transpose_a", false);
  if (!transpose_a.ok()) return cpu::WithOpType(kOpType, transpose_a.status());
  absl::StatusOr<bool> transpose_b = attributes.GetBool("transpose_b", false);
  if (!transpose_b.ok()) return cpu::WithOpType(kOpType, transpose_b.status());
  dimensions.transpose_a = *transpose_a;
  dimensions.transpose_b = *transpose_b;

  const Shape a = Shape::FromProto(init.inputs[0]);
  const Shape b = Shape::FromProto(init.inputs[1]);
  const Shape c = Shape::FromProto(init.outputs[0]);
  if (a.rank() < 2 || b.rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(kOpType, ": inputs must have rank >= 2, got a ",
                                                   a.ToString(), " and b ", b.ToString()));
  }
  if (b.rank() != 2 && b.rank() != a.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(kOpType,
                                                   ": b must have rank 2 or the rank of a, got a ",
                                                   a.ToString(), " and b ", b.ToString()));
  }
  const int batch_rank = a.rank() - 2;
  dimensions.broadcast_b = b.rank() == 2 && batch_rank > 0;
  if (!dimensions.broadcast_b) {
    for (int axis = 0; axis < batch_rank; ++axis) {
      if (a.dimension(axis) != b.dimension(axis)) {
        return absl::InvalidArgumentError(absl::StrCat(kOpType, ": batch dimensions differ: a is ",
                                                       a.ToString(), ", b is ", b.ToString()));
      }
    }
  }
  for (int axis = 0; axis < batch_rank; ++axis) dimensions.batch *= a.dimension(axis);

  const int64_t a_rows = a.dimension(batch_rank);
  const int64_t a_columns = a.dimension(batch_rank + 1);
  const int64_t b_rows = b.dimension(b.rank() - 2);
  const int64_t b_columns = b.dimension(b.rank() - 1);
  dimensions.m = dimensions.transpose_a ? a_columns : a_rows;
  dimensions.k = dimensions.transpose_a ? a_rows : a_columns;
  const int64_t b_inner = dimensions.transpose_b ? b_columns : b_rows;
  dimensions.n = dimensions.transpose_b ? b_rows : b_columns;
  if (dimensions.k != b_inner) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": inner dimensions differ: a is ",
                     Describe(a, "transpose_a", dimensions.transpose_a), ", b is ",
                     Describe(b, "transpose_b", dimensions.transpose_b)));
  }

  Shape expected = a;
  expected.set_dimension(batch_rank, dimensions.m);
  expected.set_dimension(batch_rank + 1, dimensions.n);
  if (c != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType, ": output c is ", c.ToString(), " but a ",
        Describe(a, "transpose_a", dimensions.transpose_a), " times b ",
        Describe(b, "transpose_b", dimensions.transpose_b), " is ", expected.ToString()));
  }
  if (!FitsBlasInt(dimensions.m) || !FitsBlasInt(dimensions.n) || !FitsBlasInt(dimensions.k)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": matrix dimensions of a ", a.ToString(), " and b ", b.ToString(),
                     " exceed what BLAS can index (", std::numeric_limits<int>::max(), ")"));
  }
  return dimensions;
}

}  // namespace loom
