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
#include "kernels/matmul_dimensions.h"
#include "runtime/tensor.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "matmul";

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

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateMatmulKernel(const KernelInit& init) {
  absl::StatusOr<MatmulDimensions> dimensions = CheckMatmul(init, plan::FLOAT32);
  if (!dimensions.ok()) return dimensions.status();
  return std::make_unique<MatmulKernel>(init, *dimensions);
}

}  // namespace loom::cpu
