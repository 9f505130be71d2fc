#include "kernels/cpu/matmul_kernel.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/cast_kernel.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/matmul_dimensions.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "matmul";

class MatmulKernel : public Kernel {
 public:
  MatmulKernel(const KernelInit& init, const MatmulDimensions& dimensions, bool bfloat16)
      : signature_(init), dimensions_(dimensions), bfloat16_(bfloat16) {
    if (bfloat16_) {
      a_.resize(Count(init.inputs[0]));
      b_.resize(Count(init.inputs[1]));
      c_.resize(Count(init.outputs[0]));
    }
  }

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    if (!bfloat16_) {
      Multiply(context.inputs[0].Data<const float>(), context.inputs[1].Data<const float>(),
               context.outputs[0].Data<float>());
      return absl::OkStatus();
    }
    // bfloat16 storage, float32 arithmetic: the inputs widen exactly, the product accumulates in
    // float32 and is rounded once to bfloat16 (as cuBLAS does with CUBLAS_COMPUTE_32F).
    Widen(context.inputs[0], &a_);
    Widen(context.inputs[1], &b_);
    Multiply(a_.data(), b_.data(), c_.data());
    auto* c = static_cast<uint16_t*>(context.outputs[0].data);
    for (size_t i = 0; i < c_.size(); ++i) c[i] = Float32ToBfloat16(c_[i]);
    return absl::OkStatus();
  }

 private:
  static int64_t Count(const plan::TensorDesc& desc) {
    int64_t count = 1;
    for (int64_t dimension : desc.shape()) count *= dimension;
    return count;
  }

  static void Widen(const TensorView& tensor, std::vector<float>* wide) {
    const auto* bits = static_cast<const uint16_t*>(tensor.data);
    for (size_t i = 0; i < wide->size(); ++i) (*wide)[i] = Bfloat16ToFloat32(bits[i]);
  }

  void Multiply(const float* a, const float* b, float* c) const {
    const MatmulDimensions& d = dimensions_;
    if (d.batch == 0 || d.m == 0 || d.n == 0) return;
    if (d.k == 0) {
      std::fill(c, c + d.batch * d.m * d.n, 0.0f);
      return;
    }
    // One b for every batch element and a not transposed: the batch is one taller GEMM.
    if (d.broadcast_b && !d.transpose_a && FitsBlasInt(d.batch * d.m)) {
      Gemm(a, b, c, d.batch * d.m);
      return;
    }
    const int64_t a_stride = d.m * d.k;
    const int64_t b_stride = d.broadcast_b ? 0 : d.k * d.n;
    const int64_t c_stride = d.m * d.n;
    for (int64_t index = 0; index < d.batch; ++index) {
      Gemm(a + index * a_stride, b + index * b_stride, c + index * c_stride, d.m);
    }
  }

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
  const bool bfloat16_;
  // bfloat16: float32 copies of a, b and c (empty for float32).
  std::vector<float> a_;
  std::vector<float> b_;
  std::vector<float> c_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateMatmulKernel(const KernelInit& init) {
  if (absl::Status status = CheckArity(kOpType, init, 2, 1); !status.ok()) return status;
  const bool bfloat16 = init.inputs[0].data_type() == plan::BFLOAT16;
  absl::StatusOr<MatmulDimensions> dimensions =
      CheckMatmul(init, bfloat16 ? plan::BFLOAT16 : plan::FLOAT32);
  if (!dimensions.ok()) return dimensions.status();
  return std::make_unique<MatmulKernel>(init, *dimensions, bfloat16);
}

}  // namespace loom::cpu
