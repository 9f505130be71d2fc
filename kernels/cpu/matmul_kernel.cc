#include "kernels/cpu/matmul_kernel.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "runtime/tensor.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "matmul";

// The sizes of one GEMM and how many of them there are. Matrices are row-major and contiguous.
struct MatmulDimensions {
  int64_t batch = 1;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  // b is rank 2 while a is batched: the same b for every batch element.
  bool broadcast_b = false;
};

std::string Describe(const Shape& shape, const char* transpose_name, bool transpose) {
  return absl::StrCat(shape.ToString(), " (", transpose_name, "=", transpose ? "true" : "false",
                      ")");
}

bool FitsBlasInt(int64_t value) { return value <= std::numeric_limits<int>::max(); }

class MatmulKernel : public Kernel {
 public:
  MatmulKernel(const KernelInit& init, const MatmulDimensions& dimensions)
      : signature_(init), dimensions_(dimensions) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    const float* a = context.inputs[0].Data<const float>();
    const float* b = context.inputs[1].Data<const float>();
    float* c = context.outputs[0].Data<float>();
    const MatmulDimensions& d = dimensions_;
    if (d.batch == 0 || d.m == 0 || d.n == 0) return absl::OkStatus();
    if (d.k == 0) {
      std::fill(c, c + d.batch * d.m * d.n, 0.0f);
      return absl::OkStatus();
    }
    // One b for every batch element and a not transposed: the batch is one taller GEMM.
    if (d.broadcast_b && !d.transpose_a && FitsBlasInt(d.batch * d.m)) {
      Gemm(a, b, c, d.batch * d.m);
      return absl::OkStatus();
    }
    const int64_t a_stride = d.m * d.k;
    const int64_t b_stride = d.broadcast_b ? 0 : d.k * d.n;
    const int64_t c_stride = d.m * d.n;
    for (int64_t index = 0; index < d.batch; ++index) {
      Gemm(a + index * a_stride, b + index * b_stride, c + index * c_stride, d.m);
    }
    return absl::OkStatus();
  }

 private:
  // c [rows, n] = op(a) [rows, k] @ op(b) [k, n].
  void Gemm(const float* a, const float* b, float* c, int64_t rows) const {
    const MatmulDimensions& d = dimensions_;
    const int lda = static_cast<int>(d.transpose_a ? rows : d.k);
    const int ldb = static_cast<int>(d.transpose_b ? d.k : d.n);
    cblas_sgemm(CblasRowMajor, d.transpose_a ? CblasTrans : CblasNoTrans,
                d.transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
                static_cast<int>(d.n), static_cast<int>(d.k), 1.0f, a, lda, b, ldb, 0.0f, c,
                static_cast<int>(d.n));
  }

  TensorSignature signature_;
  MatmulDimensions dimensions_;
};

absl::StatusOr<MatmulDimensions> CheckMatmul(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 2, 1);
  if (!status.ok()) return status;
  const char* names[] = {"input 'a'", "input 'b'", "output 'c'"};
  const plan::TensorDesc* descs[] = {&init.inputs[0], &init.inputs[1], &init.outputs[0]};
  for (int index = 0; index < 3; ++index) {
    status = CheckDataType(kOpType, names[index], *descs[index], plan::FLOAT32);
    if (!status.ok()) return status;
  }
  MatmulDimensions dimensions;
  Attributes attributes(*init.conf);
  absl::StatusOr<bool> transpose_a = attributes.GetBool("transpose_a", false);
  if (!transpose_a.ok()) return WithOpType(kOpType, transpose_a.status());
  absl::StatusOr<bool> transpose_b = attributes.GetBool("transpose_b", false);
  if (!transpose_b.ok()) return WithOpType(kOpType, transpose_b.status());
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

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateMatmulKernel(const KernelInit& init) {
  absl::StatusOr<MatmulDimensions> dimensions = CheckMatmul(init);
  if (!dimensions.ok()) return dimensions.status();
  return std::make_unique<MatmulKernel>(init, *dimensions);
}

}  // namespace loom::cpu
