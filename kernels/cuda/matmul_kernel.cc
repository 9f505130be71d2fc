#include "kernels/cuda/matmul_kernel.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/matmul_dimensions.h"

namespace loom::cuda {
namespace {

constexpr char kOpType[] = "matmul";

class MatmulKernel : public Kernel {
 public:
  MatmulKernel(const KernelInit& init, const MatmulDimensions& dimensions, plan::DataType type,
               CudaStreamContext* stream, CublasHandle cublas)
      : task_name_(init.task_name),
        signature_(init),
        dimensions_(dimensions),
        element_type_(type == plan::BFLOAT16 ? CUDA_R_16BF : CUDA_R_32F),
        element_bytes_(type == plan::BFLOAT16 ? 2 : 4),
        stream_(stream),
        cublas_(cublas) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kOpType, context); !status.ok()) return status;
    const MatmulDimensions& d = dimensions_;
    void* c = context.outputs[0].data;
    if (d.batch == 0 || d.m == 0 || d.n == 0) return absl::OkStatus();
    if (d.k == 0) {
      return CudaStatus(
          cudaMemsetAsync(c, 0, d.batch * d.m * d.n * element_bytes_, stream_->stream()),
          absl::StrCat("task '", task_name_, "': matmul with k = 0"));
    }
    const void* a = context.inputs[0].data;
    const void* b = context.inputs[1].data;
    // One b for every batch element and a not transposed: the batch is one taller GEMM.
    if (d.broadcast_b && !d.transpose_a && FitsBlasInt(d.batch * d.m)) {
      return Gemm(a, b, c, d.batch * d.m, 1, 0, 0, 0);
    }
    return Gemm(a, b, c, d.m, d.batch, d.m * d.k, d.broadcast_b ? 0 : d.k * d.n, d.m * d.n);
  }

 private:
  // Row-major c [rows, n] = op(a) [rows, k] @ op(b) [k, n], `count` times with the given element
  // strides. cuBLAS is column-major: it computes c^T = op(b)^T op(a)^T, whose column-major
  // operands are exactly the row-major buffers.
  absl::Status Gemm(const void* a, const void* b, void* c, int64_t rows, int64_t count,
                    int64_t a_stride, int64_t b_stride, int64_t c_stride) const {
    const MatmulDimensions& d = dimensions_;
    const float alpha = 1.0f;
    const float beta = 0.0f;
    const int lda = static_cast<int>(d.transpose_a ? rows : d.k);
    const int ldb = static_cast<int>(d.transpose_b ? d.k : d.n);
    cublasStatus_t status = cublas_.library->gemm_strided_batched(
        cublas_.handle, d.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
        d.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(d.n), static_cast<int>(rows),
        static_cast<int>(d.k), &alpha, b, element_type_, ldb, b_stride, a, element_type_, lda,
        a_stride, &beta, c, element_type_, static_cast<int>(d.n), c_stride, static_cast<int>(count),
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return cublas_.library->Status(
        status, absl::StrCat("task '", task_name_, "': matmul [", rows, ", ", d.k, "] x [", d.k,
                             ", ", d.n, "] x ", count));
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const MatmulDimensions dimensions_;
  const cudaDataType_t element_type_;
  const int64_t element_bytes_;
  CudaStreamContext* const stream_;
  const CublasHandle cublas_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateMatmulKernel(const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(kOpType, init, 2, 1); !status.ok()) return status;
  const plan::DataType type =
      init.inputs[0].data_type() == plan::BFLOAT16 ? plan::BFLOAT16 : plan::FLOAT32;
  absl::StatusOr<MatmulDimensions> dimensions = CheckMatmul(init, type);
  if (!dimensions.ok()) return dimensions.status();
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  absl::StatusOr<CublasHandle> cublas = (*stream)->Cublas();
  if (!cublas.ok()) return cublas.status();
  return std::make_unique<MatmulKernel>(init, *dimensions, type, *stream, *cublas);
}

}  // namespace loom::cuda
