// Causal attention on CUDA, composed (not fused): cuBLAS strided-batched GEMMs around a causal
// masked softmax kernel and its backward. The [T, T] score matrix of every head is materialised
// in float32 scratch (B * H * T * T * 4 bytes, twice that for the gradient), allocated once when
// the kernel is built. See kernels/cuda/attention_kernels.h.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/scoped_device.h"
#include "kernels/cpu/causal_attention_settings.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/kernel_table.h"

namespace loom::cuda {
namespace {

constexpr char kForwardOpType[] = "causal_attention";
constexpr char kGradOpType[] = "causal_attention_grad";

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = kWarpSize * kWarpsPerBlock;
constexpr unsigned kFullMask = 0xffffffffu;
__device__ __forceinline__ float WarpMax(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  }
  return value;
}

__device__ __forceinline__ float WarpSum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kFullMask, value, offset);
  }
  return value;
}

// One warp per row of the float [rows, length] `scores` (rows = heads * length, so row r is
// position r % length of its head): a stable softmax over columns 0..r % length, as the CPU's
// (the row maximum subtracted, float exp, the reciprocal of the sum multiplied in), zeros after.
// Row r of the result goes to `probabilities` + r * `out_stride`. It may alias `scores`: either
// the same float rows (out_stride = length), or bfloat16 rows written over the first half of each
// float row (out_stride = 2 * length). Each row is read and written by its warp only, and every
// store waits (__syncwarp) until the warp has read what it overwrites.
template <typename Out>
__global__ void CausalSoftmaxKernel(const float* scores, Out* probabilities, int64_t rows,
                                    int64_t length, int64_t out_stride) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t first_warp =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  const int64_t warp_count = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarpSize;
  for (int64_t row = first_warp; row < rows; row += warp_count) {
    const float* s = scores + row * length;
    Out* p = probabilities + row * out_stride;
    const int64_t visible = row % length + 1;
    float maximum = -INFINITY;
    for (int64_t j = lane; j < visible; j += kWarpSize) maximum = fmaxf(maximum, s[j]);
    maximum = WarpMax(maximum);
    float sum = 0.0f;
    for (int64_t j = lane; j < visible; j += kWarpSize) sum += expf(s[j] - maximum);
    sum = WarpSum(sum);
    const float inverse_sum = 1.0f / sum;
    // The same trip count on every lane: __syncwarp needs the whole warp.
    for (int64_t base = 0; base < length; base += kWarpSize) {
      const int64_t j = base + lane;
      float value = 0.0f;
      if (j < visible) value = expf(s[j] - maximum) * inverse_sum;
      __syncwarp();
      if (j < length) p[j] = FromFloat<Out>(value);
    }
  }
}

// The softmax backward, one warp per row as above: with P the probabilities and dP their
// gradients (float [rows, length]), dS = P * (dP - rowsum(dP * P)) over columns 0..r % length and
// 0 after. dS row r goes to `score_gradients` + r * `out_stride`, which may alias dP as
// `probabilities` may alias scores above; when `probabilities_out` is not null, P row r is also
// written (converted) to `probabilities_out` + r * `out_stride`, which may alias P likewise.
template <typename Out>
__global__ void CausalSoftmaxGradKernel(const float* probabilities,
                                        const float* probability_gradients, Out* probabilities_out,
                                        Out* score_gradients, int64_t rows, int64_t length,
                                        int64_t out_stride) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t first_warp =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  const int64_t warp_count = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarpSize;
  for (int64_t row = first_warp; row < rows; row += warp_count) {
    const float* p = probabilities + row * length;
    const float* dp = probability_gradients + row * length;
    Out* ds_out = score_gradients + row * out_stride;
    Out* p_out = probabilities_out == nullptr ? nullptr : probabilities_out + row * out_stride;
    const int64_t visible = row % length + 1;
    float dot = 0.0f;
    for (int64_t j = lane; j < visible; j += kWarpSize) dot += dp[j] * p[j];
    dot = WarpSum(dot);
    for (int64_t base = 0; base < length; base += kWarpSize) {
      const int64_t j = base + lane;
      float probability = 0.0f;
      float gradient = 0.0f;
      if (j < visible) {
        probability = p[j];
        gradient = probability * (dp[j] - dot);
      }
      __syncwarp();
      if (j < length) {
        ds_out[j] = FromFloat<Out>(gradient);
        if (p_out != nullptr) p_out[j] = FromFloat<Out>(probability);
      }
    }
  }
}

// The CPU kernels' checks (cpu::ReadCausalAttentionSettings: every tensor of q's data type,
// float32 or bfloat16, and q's shape), and that B * H fits cuBLAS's batch count and that the
// scratch's size fits in 64 bits.
absl::StatusOr<cpu::CausalAttentionSettings> CheckAttention(
    const char* op_type, const KernelInit& init, absl::Span<const char* const> tensor_names,
    const char* q_name, int scratch_matrices) {
  absl::StatusOr<cpu::CausalAttentionSettings> settings =
      cpu::ReadCausalAttentionSettings(op_type, init, tensor_names, q_name);
  if (!settings.ok()) return settings.status();
  const cpu::CausalAttentionSettings& s = *settings;
  if (s.heads > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(op_type, ": B * H = ", s.heads,
                                                   " exceeds cuBLAS's batch count (",
                                                   std::numeric_limits<int>::max(), ")"));
  }
  const int64_t limit = std::numeric_limits<int64_t>::max() / (4 * scratch_matrices);
  if (s.heads > 0 && s.length > 0 && s.length > limit / s.length / s.heads) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": the [B * H, T, T] = [", s.heads, ", ", s.length, ", ", s.length,
                     "] float scratch of composed attention is too large"));
  }
  return settings;
}

// The state shared by the forward and the gradient: the settings, cuBLAS, and `matrix_count`
// float [B * H, T, T] scratch buffers.
class AttentionKernelBase : public Kernel {
 public:
  AttentionKernelBase(const char* op_type, const KernelInit& init,
                      const cpu::CausalAttentionSettings& attention, CudaStreamContext* stream,
                      CublasHandle cublas, int matrix_count)
      : op_type_(op_type),
        task_name_(init.task_name),
        signature_(init),
        settings_(attention),
        bfloat16_(attention.data_type == plan::BFLOAT16),
        element_type_(attention.data_type == plan::BFLOAT16 ? CUDA_R_16BF : CUDA_R_32F),
        stream_(stream),
        cublas_(cublas),
        scratch_(matrix_count, nullptr) {}

  ~AttentionKernelBase() override {
    ScopedDevice device(stream_->device());
    for (float* buffer : scratch_) {
      if (buffer != nullptr) cudaFree(buffer);
    }
  }

  AttentionKernelBase(const AttentionKernelBase&) = delete;
  AttentionKernelBase& operator=(const AttentionKernelBase&) = delete;

  // Allocates the scratch, once (none when there is nothing to compute).
  absl::Status Allocate() {
    if (IsEmpty()) return absl::OkStatus();
    ScopedDevice device(stream_->device());
    if (absl::Status status = CudaStatus(
            device.error(), absl::StrCat(What(), ": selecting cuda:", stream_->device()));
        !status.ok()) {
      return status;
    }
    const int64_t bytes =
        settings_.heads * settings_.length * settings_.length * static_cast<int64_t>(sizeof(float));
    for (float*& buffer : scratch_) {
      void* memory = nullptr;
      if (absl::Status status =
              CudaStatus(cudaMalloc(&memory, bytes),
                         absl::StrCat(What(), ": allocating ", bytes, " bytes of [B * H, T, T] = [",
                                      settings_.heads, ", ", settings_.length, ", ",
                                      settings_.length, "] attention scratch"));
          !status.ok()) {
        return status;
      }
      buffer = static_cast<float*>(memory);
    }
    return absl::OkStatus();
  }

 protected:
  bool IsEmpty() const {
    return settings_.heads == 0 || settings_.length == 0 || settings_.head_size == 0;
  }

  std::string What() const { return absl::StrCat("task '", task_name_, "': ", op_type_); }

  // A [rows, length] operand as cuBLAS reads it: its data, type, row stride and matrix stride (in
  // elements).
  struct Operand {
    const void* data;
    cudaDataType_t type;
    int64_t row_stride;
    int64_t matrix_stride;
  };

  // The [T, Dh] matrices of a tensor of the kernel's data type.
  Operand Tensor(const void* data) const {
    return {data, element_type_, settings_.head_size, settings_.length * settings_.head_size};
  }

  // The [T, T] matrices of a scratch buffer: float, or bfloat16 written over the first half of
  // each float row.
  Operand Scratch(const float* data, bool bfloat16) const {
    const int64_t t = settings_.length;
    if (bfloat16) return {data, CUDA_R_16BF, 2 * t, 2 * t * t};
    return {data, CUDA_R_32F, t, t * t};
  }

  // For every (b, h): row-major c [m, n] = alpha * op(a) [m, k] @ op(b) [k, n], c of type
  // `c_type` with rows of `n` elements. cuBLAS is column-major: it computes c^T = op(b)^T op(a)^T,
  // whose column-major operands are exactly the row-major buffers.
  absl::Status Gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const Operand& a, const Operand& b, void* c, cudaDataType_t c_type,
                    const char* what) const {
    const float beta = 0.0f;
    const cublasStatus_t status = cublas_.library->gemm_strided_batched(
        cublas_.handle, transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
        transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
        static_cast<int>(k), &alpha, b.data, b.type, static_cast<int>(b.row_stride),
        b.matrix_stride, a.data, a.type, static_cast<int>(a.row_stride), a.matrix_stride, &beta, c,
        c_type, static_cast<int>(n), m * n, static_cast<int>(settings_.heads), CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT);
    return cublas_.library->Status(
        status, absl::StrCat(What(), ": ", what, " GEMM [", m, ", ", k, "] x [", k, ", ", n, "] x ",
                             settings_.heads));
  }

  // The causal softmax of scratch buffer `scores`, in place: float, or bfloat16 over the first
  // half of each row when `bfloat16`.
  absl::Status Softmax(float* scores, bool bfloat16) const {
    const int64_t rows = settings_.heads * settings_.length;
    const int64_t t = settings_.length;
    const int blocks = static_cast<int>(BlocksFor(rows, kWarpsPerBlock));
    if (bfloat16) {
      CausalSoftmaxKernel<__nv_bfloat16><<<blocks, kThreads, 0, stream_->stream()>>>(
          scores, reinterpret_cast<__nv_bfloat16*>(scores), rows, t, 2 * t);
    } else {
      CausalSoftmaxKernel<float>
          <<<blocks, kThreads, 0, stream_->stream()>>>(scores, scores, rows, t, t);
    }
    return LaunchStatus(absl::StrCat(What(), ": causal softmax"));
  }

  const char* const op_type_;
  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const cpu::CausalAttentionSettings settings_;
  const bool bfloat16_;
  const cudaDataType_t element_type_;
  CudaStreamContext* const stream_;
  const CublasHandle cublas_;
  std::vector<float*> scratch_;
};

// output = softmax(scale * q k^T + causal mask) v for every (b, h).
class CausalAttentionKernel final : public AttentionKernelBase {
 public:
  CausalAttentionKernel(const KernelInit& init, const cpu::CausalAttentionSettings& attention,
                        CudaStreamContext* stream, CublasHandle cublas)
      : AttentionKernelBase(kForwardOpType, init, attention, stream, cublas, /*matrix_count=*/1) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kForwardOpType, context); !status.ok()) {
      return status;
    }
    if (IsEmpty()) return absl::OkStatus();
    const int64_t t = settings_.length;
    const int64_t d = settings_.head_size;
    const Operand q = Tensor(context.inputs[0].data);
    const Operand k = Tensor(context.inputs[1].data);
    const Operand v = Tensor(context.inputs[2].data);
    void* output = context.outputs[0].data;
    float* scores = scratch_[0];
    // scores [T, T] = scale * q [T, Dh] @ k^T [Dh, T].
    if (absl::Status status = Gemm(false, true, t, t, d, settings_.scale, q, k, scores, CUDA_R_32F,
                                   "scores = scale * q k^T");
        !status.ok()) {
      return status;
    }
    if (absl::Status status = Softmax(scores, bfloat16_); !status.ok()) return status;
    // output [T, Dh] = probabilities [T, T] @ v [T, Dh].
    return Gemm(false, false, t, d, t, 1.0f, Scratch(scores, bfloat16_), v, output, element_type_,
                "output = probabilities v");
  }
};

// The gradient: P recomputed as the forward does, then dv = P^T dy, dP = dy v^T,
// dS = P * (dP - rowsum(dP * P)), dq = scale * dS k, dk = scale * dS^T q.
class CausalAttentionGradKernel final : public AttentionKernelBase {
 public:
  CausalAttentionGradKernel(const KernelInit& init, const cpu::CausalAttentionSettings& attention,
                            CudaStreamContext* stream, CublasHandle cublas)
      : AttentionKernelBase(kGradOpType, init, attention, stream, cublas, /*matrix_count=*/2) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kGradOpType, context); !status.ok()) {
      return status;
    }
    if (IsEmpty()) return absl::OkStatus();
    const int64_t t = settings_.length;
    const int64_t d = settings_.head_size;
    const Operand q = Tensor(context.inputs[0].data);
    const Operand k = Tensor(context.inputs[1].data);
    const Operand v = Tensor(context.inputs[2].data);
    const Operand dy = Tensor(context.inputs[3].data);
    void* dq = context.outputs[0].data;
    void* dk = context.outputs[1].data;
    void* dv = context.outputs[2].data;
    float* p = scratch_[0];
    float* dp = scratch_[1];
    // P [T, T]: scale * q k^T, then the causal softmax in float, exactly as the forward.
    if (absl::Status status =
            Gemm(false, true, t, t, d, settings_.scale, q, k, p, CUDA_R_32F, "scale * q k^T");
        !status.ok()) {
      return status;
    }
    if (absl::Status status = Softmax(p, /*bfloat16=*/false); !status.ok()) return status;
    // dP [T, T] = dy [T, Dh] @ v^T [Dh, T], in float.
    if (absl::Status status =
            Gemm(false, true, t, t, d, 1.0f, dy, v, dp, CUDA_R_32F, "dP = dy v^T");
        !status.ok()) {
      return status;
    }
    // dS over dP; with bfloat16 also P rounded over P (both over the first half of their rows).
    const int64_t rows = settings_.heads * t;
    const int blocks = static_cast<int>(BlocksFor(rows, kWarpsPerBlock));
    if (bfloat16_) {
      CausalSoftmaxGradKernel<__nv_bfloat16><<<blocks, kThreads, 0, stream_->stream()>>>(
          p, dp, reinterpret_cast<__nv_bfloat16*>(p), reinterpret_cast<__nv_bfloat16*>(dp), rows, t,
          2 * t);
    } else {
      CausalSoftmaxGradKernel<float>
          <<<blocks, kThreads, 0, stream_->stream()>>>(p, dp, nullptr, dp, rows, t, t);
    }
    if (absl::Status status = LaunchStatus(absl::StrCat(What(), ": causal softmax backward"));
        !status.ok()) {
      return status;
    }
    const Operand probabilities = Scratch(p, bfloat16_);
    const Operand score_gradients = Scratch(dp, bfloat16_);
    // dv [T, Dh] = P^T [T, T] @ dy [T, Dh].
    if (absl::Status status =
            Gemm(true, false, t, d, t, 1.0f, probabilities, dy, dv, element_type_, "dv = P^T dy");
        !status.ok()) {
      return status;
    }
    // dq [T, Dh] = scale * dS [T, T] @ k [T, Dh].
    if (absl::Status status = Gemm(false, false, t, d, t, settings_.scale, score_gradients, k, dq,
                                   element_type_, "dq = scale * dS k");
        !status.ok()) {
      return status;
    }
    // dk [T, Dh] = scale * dS^T [T, T] @ q [T, Dh].
    return Gemm(true, false, t, d, t, settings_.scale, score_gradients, q, dk, element_type_,
                "dk = scale * dS^T q");
  }
};

template <typename KernelType>
absl::StatusOr<std::unique_ptr<Kernel>> MakeAttentionKernel(
    const KernelInit& init, const cpu::CausalAttentionSettings& attention) {
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  absl::StatusOr<CublasHandle> cublas = (*stream)->Cublas();
  if (!cublas.ok()) return cublas.status();
  auto kernel = std::make_unique<KernelType>(init, attention, *stream, *cublas);
  if (absl::Status status = kernel->Allocate(); !status.ok()) return status;
  return kernel;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateCausalAttentionKernel(const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(kForwardOpType, init, 3, 1); !status.ok()) {
    return status;
  }
  static constexpr const char* kNames[] = {"input 'q'", "input 'k'", "input 'v'", "output"};
  absl::StatusOr<cpu::CausalAttentionSettings> attention =
      CheckAttention(kForwardOpType, init, kNames, "q", /*scratch_matrices=*/1);
  if (!attention.ok()) return attention.status();
  return MakeAttentionKernel<CausalAttentionKernel>(init, *attention);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateCausalAttentionGradKernel(const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(kGradOpType, init, 4, 3); !status.ok()) {
    return status;
  }
  static constexpr const char* kNames[] = {"input 'q'",   "input 'k'",   "input 'v'",  "input 'dy'",
                                           "output 'dq'", "output 'dk'", "output 'dv'"};
  absl::StatusOr<cpu::CausalAttentionSettings> attention =
      CheckAttention(kGradOpType, init, kNames, "input 'q'", /*scratch_matrices=*/2);
  if (!attention.ok()) return attention.status();
  return MakeAttentionKernel<CausalAttentionGradKernel>(init, *attention);
}

}  // namespace

absl::Status RegisterCudaAttentionKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {kForwardOpType, CreateCausalAttentionKernel},
      {kGradOpType, CreateCausalAttentionGradKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
