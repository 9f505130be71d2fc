#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "device/cuda/cuda_status.h"
#include "kernels/attributes.h"
#include "kernels/cpu/cross_entropy_rows.h"
#include "kernels/cpu/embedding_row_range.h"
#include "kernels/cpu/gradients/cross_entropy_grad_kernel.h"
#include "kernels/cpu/gradients/embedding_grad_kernel.h"
#include "kernels/cpu/gradients/layer_norm_grad_kernel.h"
#include "kernels/cpu/gradients/softmax_grad_kernels.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cuda/bad_value_report.cuh"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/cuda/row_gradient_kernels.h"
#include "kernels/cuda/row_reductions.cuh"
#include "kernels/kernel_table.h"

namespace loom::cuda {
namespace {

constexpr char kSoftmaxGrad[] = "softmax_grad";
constexpr char kLogSoftmaxGrad[] = "log_softmax_grad";
constexpr char kLayerNormGrad[] = "layer_norm_grad";
constexpr char kCrossEntropyGrad[] = "sparse_cross_entropy_grad";
constexpr char kEmbeddingGrad[] = "embedding_grad";

constexpr int kThreads = 256;

// ---------------------------------------------------------------------------------------------
// Device side.

// softmax_grad (dx = y * (dy - sum(dy * y))) or log_softmax_grad (dx = dy - exp(y) * sum(dy)),
// one block per row of n.
template <typename T, bool kLog>
__global__ void __launch_bounds__(kMaxRowThreads)
    RowGradKernel(const T* __restrict__ y, const T* __restrict__ dy, int64_t rows, int64_t n,
                  T* __restrict__ dx) {
  __shared__ float shared[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* y_row = y + row * n;
    const T* dy_row = dy + row * n;
    T* dx_row = dx + row * n;
    float partial = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float dy_value = ToFloat(dy_row[i]);
      partial += kLog ? dy_value : dy_value * ToFloat(y_row[i]);
    }
    const float total = BlockSum(partial, shared);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float y_value = ToFloat(y_row[i]);
      const float dy_value = ToFloat(dy_row[i]);
      dx_row[i] =
          FromFloat<T>(kLog ? dy_value - expf(y_value) * total : y_value * (dy_value - total));
    }
  }
}

// layer_norm_grad's rows: the forward's statistics (kept in `means` and `rstds` for the column
// sums), then dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma.
template <typename T>
__global__ void __launch_bounds__(kMaxRowThreads)
    LayerNormGradRowsKernel(const T* __restrict__ x, const T* __restrict__ gamma,
                            const T* __restrict__ dy, int64_t rows, int64_t n, double epsilon,
                            T* __restrict__ dx, float* __restrict__ means,
                            float* __restrict__ rstds) {
  __shared__ float shared[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x_row = x + row * n;
    const T* dy_row = dy + row * n;
    T* dx_row = dx + row * n;
    float partial = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) partial += ToFloat(x_row[i]);
    const float sum = BlockSum(partial, shared);
    const float mean = static_cast<float>(static_cast<double>(sum) / static_cast<double>(n));
    partial = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float centred = ToFloat(x_row[i]) - mean;
      partial += centred * centred;
    }
    const float squares = BlockSum(partial, shared);
    const float rstd = static_cast<float>(
        1.0 / sqrt(static_cast<double>(squares) / static_cast<double>(n) + epsilon));
    float g_partial = 0.0f;
    float g_xhat_partial = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float xhat = (ToFloat(x_row[i]) - mean) * rstd;
      const float g = ToFloat(dy_row[i]) * ToFloat(gamma[i]);
      g_partial += g;
      g_xhat_partial += g * xhat;
    }
    const float g_sum = BlockSum(g_partial, shared);
    const float g_xhat_sum = BlockSum(g_xhat_partial, shared);
    const float g_mean = static_cast<float>(static_cast<double>(g_sum) / static_cast<double>(n));
    const float g_xhat_mean =
        static_cast<float>(static_cast<double>(g_xhat_sum) / static_cast<double>(n));
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const float xhat = (ToFloat(x_row[i]) - mean) * rstd;
      const float g = ToFloat(dy_row[i]) * ToFloat(gamma[i]);
      dx_row[i] = FromFloat<T>(rstd * (g - g_mean - xhat * g_xhat_mean));
    }
    if (threadIdx.x == 0) {
      means[row] = mean;
      rstds[row] = rstd;
    }
  }
}

// Column sums of dy * xhat and dy over the rows of chunk blockIdx.y (rows_per_chunk rows, in
// order), one thread per column.
template <typename T>
__global__ void LayerNormGradColumnPartialsKernel(const T* __restrict__ x, const T* __restrict__ dy,
                                                  const float* __restrict__ means,
                                                  const float* __restrict__ rstds, int64_t rows,
                                                  int64_t n, int64_t rows_per_chunk,
                                                  float* __restrict__ gamma_partials,
                                                  float* __restrict__ beta_partials) {
  const int64_t column = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (column >= n) return;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * rows_per_chunk;
  const int64_t end = min(begin + rows_per_chunk, rows);
  float gamma_sum = 0.0f;
  float beta_sum = 0.0f;
  for (int64_t row = begin; row < end; ++row) {
    const float dy_value = ToFloat(dy[row * n + column]);
    const float xhat = (ToFloat(x[row * n + column]) - means[row]) * rstds[row];
    gamma_sum += dy_value * xhat;
    beta_sum += dy_value;
  }
  gamma_partials[chunk * n + column] = gamma_sum;
  beta_partials[chunk * n + column] = beta_sum;
}

// dgamma and dbeta: the chunks' partial sums added in chunk order (in double); zeros without
// chunks.
template <typename T>
__global__ void LayerNormGradColumnSumsKernel(const float* __restrict__ gamma_partials,
                                              const float* __restrict__ beta_partials,
                                              int64_t chunks, int64_t n, T* __restrict__ dgamma,
                                              T* __restrict__ dbeta) {
  for (int64_t column = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; column < n;
       column += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double gamma_sum = 0.0;
    double beta_sum = 0.0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      gamma_sum += gamma_partials[chunk * n + column];
      beta_sum += beta_partials[chunk * n + column];
    }
    dgamma[column] = FromFloat<T>(static_cast<float>(gamma_sum));
    dbeta[column] = FromFloat<T>(static_cast<float>(beta_sum));
  }
}

// sparse_cross_entropy_grad, one block per sample: dlogits = (softmax(logits) - onehot(label)) *
// dloss; zeros for ignored samples. A label out of range records its sample in `act_bad` (the
// smallest such sample wins) and gets a row of NaN: the next act reports it.
template <typename T, typename Label>
__global__ void __launch_bounds__(kMaxRowThreads)
    CrossEntropyGradKernel(const T* __restrict__ logits, const Label* __restrict__ labels,
                           const T* __restrict__ dloss, int64_t samples, int64_t classes,
                           int64_t ignore_index, T* __restrict__ dlogits,
                           unsigned long long* act_bad) {
  __shared__ float shared[32];
  for (int64_t sample = blockIdx.x; sample < samples; sample += gridDim.x) {
    const int64_t label = static_cast<int64_t>(labels[sample]);
    T* out = dlogits + sample * classes;
    if (label == ignore_index) {
      for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) out[i] = FromFloat<T>(0.0f);
      continue;
    }
    if (label < 0 || label >= classes) {
      if (threadIdx.x == 0) atomicMin(act_bad, static_cast<unsigned long long>(sample));
      for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) out[i] = FromFloat<T>(NAN);
      continue;
    }
    const T* row = logits + sample * classes;
    float partial = -INFINITY;
    for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) {
      partial = fmaxf(partial, ToFloat(row[i]));
    }
    const float maximum = BlockMax(partial, shared);
    partial = 0.0f;
    for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) {
      partial += expf(ToFloat(row[i]) - maximum);
    }
    const float sum = BlockSum(partial, shared);
    const float inverse_sum = static_cast<float>(1.0 / static_cast<double>(sum));
    const float scale = ToFloat(dloss[sample]);
    for (int64_t i = threadIdx.x; i < classes; i += blockDim.x) {
      float value = expf(ToFloat(row[i]) - maximum) * inverse_sum * scale;
      if (i == label) value -= scale;
      out[i] = FromFloat<T>(value);
    }
  }
}

// embedding_grad, step 1: each position's key is its local table row, or `rows` when another
// shard holds it or it is out of range (recorded in `act_bad`, smallest position wins).
template <typename Id>
__global__ void EmbeddingKeysKernel(const Id* __restrict__ ids, int64_t count, int64_t logical_rows,
                                    int64_t row_offset, int64_t rows, uint32_t* __restrict__ keys,
                                    int32_t* __restrict__ positions, unsigned long long* act_bad) {
  for (int64_t position = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       position < count; position += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t id = static_cast<int64_t>(ids[position]);
    int64_t key = rows;
    if (id < 0 || id >= logical_rows) {
      atomicMin(act_bad, static_cast<unsigned long long>(position));
    } else {
      const int64_t local = id - row_offset;
      if (local >= 0 && local < rows) key = local;
    }
    keys[position] = static_cast<uint32_t>(key);
    positions[position] = static_cast<int32_t>(position);
  }
}

// Step 3: where each key's run starts in the sorted keys; row_start has rows + 2 entries (the run
// of row r is [row_start[r], row_start[r + 1])).
__global__ void EmbeddingRowStartsKernel(const uint32_t* __restrict__ sorted_keys, int64_t count,
                                         int64_t rows, int32_t* __restrict__ row_start) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i <= count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t previous = i == 0 ? -1 : static_cast<int64_t>(sorted_keys[i - 1]);
    const int64_t current = i == count ? rows + 1 : static_cast<int64_t>(sorted_keys[i]);
    for (int64_t key = previous + 1; key <= current; ++key) {
      row_start[key] = static_cast<int32_t>(i);
    }
  }
}

// Step 4: every element of dtable, the sum of its column of dy over the positions of its row,
// in position order (the CPU's order); zero for rows never looked up.
template <typename T>
__global__ void EmbeddingAccumulateKernel(const T* __restrict__ dy,
                                          const int32_t* __restrict__ sorted_positions,
                                          const int32_t* __restrict__ row_start, int64_t rows,
                                          int64_t width, T* __restrict__ dtable) {
  const int64_t elements = rows * width;
  for (int64_t element = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       element < elements; element += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = element / width;
    const int64_t column = element - row * width;
    const int32_t begin = row_start[row];
    const int32_t end = row_start[row + 1];
    float sum = 0.0f;
    for (int32_t j = begin; j < end; ++j) {
      sum += ToFloat(dy[static_cast<int64_t>(sorted_positions[j]) * width + column]);
    }
    dtable[element] = FromFloat<T>(sum);
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

int RowBlocks(int64_t rows) {
  return static_cast<int>(std::clamp<int64_t>(rows, 1, kMaxRowBlocks));
}

// softmax_grad and log_softmax_grad.
class RowGradKernelImpl final : public Kernel {
 public:
  RowGradKernelImpl(const KernelInit& init, const char* op_type, bool log, int64_t n, bool bfloat16,
                    CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        op_type_(op_type),
        log_(log),
        n_(n),
        bfloat16_(bfloat16),
        stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(op_type_, context); !status.ok()) return status;
    if (n_ == 0) return absl::OkStatus();
    const int64_t rows = context.inputs[0].NumElements() / n_;
    if (rows == 0) return absl::OkStatus();
    if (bfloat16_) {
      return log_ ? Run<__nv_bfloat16, true>(context, rows)
                  : Run<__nv_bfloat16, false>(context, rows);
    }
    return log_ ? Run<float, true>(context, rows) : Run<float, false>(context, rows);
  }

 private:
  template <typename T, bool kLog>
  absl::Status Run(const KernelContext& context, int64_t rows) {
    RowGradKernel<T, kLog><<<RowBlocks(rows), RowThreads(n_), 0, stream_->stream()>>>(
        context.inputs[0].Data<const T>(), context.inputs[1].Data<const T>(), rows, n_,
        context.outputs[0].Data<T>());
    return LaunchStatus(What(task_name_, op_type_));
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const char* const op_type_;
  const bool log_;
  const int64_t n_;
  const bool bfloat16_;
  CudaStreamContext* const stream_;
};

// layer_norm_grad.
class LayerNormGradKernelImpl final : public Kernel {
 public:
  // Chunks of rows whose column partial sums are added in order.
  static constexpr int64_t kMaxChunks = 128;
  static constexpr int64_t kMinRowsPerChunk = 8;

  LayerNormGradKernelImpl(const KernelInit& init, int64_t rows, int64_t n, double epsilon,
                          bool bfloat16, CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        rows_(rows),
        n_(n),
        epsilon_(epsilon),
        bfloat16_(bfloat16),
        stream_(stream) {
    if (rows_ > 0) {
      const int64_t wanted =
          std::clamp<int64_t>((rows_ + kMinRowsPerChunk - 1) / kMinRowsPerChunk, 1, kMaxChunks);
      rows_per_chunk_ = (rows_ + wanted - 1) / wanted;
      chunks_ = (rows_ + rows_per_chunk_ - 1) / rows_per_chunk_;
    }
  }
  ~LayerNormGradKernelImpl() override {
    for (float* buffer : {means_, rstds_, gamma_partials_, beta_partials_}) {
      if (buffer != nullptr) cudaFree(buffer);
    }
  }

  absl::Status Allocate() {
    const std::string what = What(task_name_, kLayerNormGrad);
    const int64_t rows = std::max<int64_t>(rows_, 1);
    const int64_t partials = std::max<int64_t>(chunks_ * n_, 1);
    for (auto [buffer, count] : {std::pair<float**, int64_t>{&means_, rows},
                                 {&rstds_, rows},
                                 {&gamma_partials_, partials},
                                 {&beta_partials_, partials}}) {
      if (absl::Status status =
              CudaStatus(cudaMalloc(buffer, static_cast<size_t>(count) * sizeof(float)), what);
          !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kLayerNormGrad, context); !status.ok()) {
      return status;
    }
    if (n_ == 0) return absl::OkStatus();
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const std::string what = What(task_name_, kLayerNormGrad);
    const cudaStream_t stream = stream_->stream();
    const T* x = context.inputs[0].Data<const T>();
    const T* gamma = context.inputs[1].Data<const T>();
    const T* dy = context.inputs[2].Data<const T>();
    if (rows_ > 0) {
      LayerNormGradRowsKernel<T><<<RowBlocks(rows_), RowThreads(n_), 0, stream>>>(
          x, gamma, dy, rows_, n_, epsilon_, context.outputs[0].Data<T>(), means_, rstds_);
      if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
      const dim3 grid(static_cast<unsigned int>((n_ + kThreads - 1) / kThreads),
                      static_cast<unsigned int>(chunks_));
      LayerNormGradColumnPartialsKernel<T><<<grid, kThreads, 0, stream>>>(
          x, dy, means_, rstds_, rows_, n_, rows_per_chunk_, gamma_partials_, beta_partials_);
      if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    }
    LayerNormGradColumnSumsKernel<T>
        <<<static_cast<int>(BlocksFor(n_, kThreads)), kThreads, 0, stream>>>(
            gamma_partials_, beta_partials_, chunks_, n_, context.outputs[1].Data<T>(),
            context.outputs[2].Data<T>());
    return LaunchStatus(what);
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const int64_t rows_;
  const int64_t n_;
  const double epsilon_;
  const bool bfloat16_;
  CudaStreamContext* const stream_;
  int64_t rows_per_chunk_ = 0;
  int64_t chunks_ = 0;
  // Scratch: each row's mean and rstd, and the chunks' column partial sums [chunks, n].
  float* means_ = nullptr;
  float* rstds_ = nullptr;
  float* gamma_partials_ = nullptr;
  float* beta_partials_ = nullptr;
};

// sparse_cross_entropy_grad.
template <typename Label>
class CrossEntropyGradKernelImpl final : public Kernel {
 public:
  CrossEntropyGradKernelImpl(const KernelInit& init, int64_t classes, int64_t ignore_index,
                             bool bfloat16, CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        labels_shape_(Shape::FromProto(init.inputs[1])),
        samples_(labels_shape_.NumElements()),
        classes_(classes),
        ignore_index_(ignore_index),
        bfloat16_(bfloat16),
        stream_(stream) {}

  absl::Status Allocate() {
    return report_.Allocate(stream_->stream(), What(task_name_, kCrossEntropyGrad));
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = report_.Check(task_name_, stream_->stream(),
                                            [this](int64_t sample, int64_t label) {
                                              return cpu::CheckSparseLabel(kCrossEntropyGrad, label,
                                                                           classes_, ignore_index_,
                                                                           labels_shape_, sample);
                                            });
        !status.ok()) {
      return status;
    }
    if (absl::Status status = signature_.Check(kCrossEntropyGrad, context); !status.ok()) {
      return status;
    }
    if (samples_ == 0) return absl::OkStatus();
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const std::string what = What(task_name_, kCrossEntropyGrad);
    const cudaStream_t stream = stream_->stream();
    const Label* labels = context.inputs[1].Data<const Label>();
    CrossEntropyGradKernel<T, Label><<<RowBlocks(samples_), RowThreads(classes_), 0, stream>>>(
        context.inputs[0].Data<const T>(), labels, context.inputs[2].Data<const T>(), samples_,
        classes_, ignore_index_, context.outputs[0].Data<T>(), report_.act());
    if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    return report_.Publish(labels, stream, what);
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const Shape labels_shape_;
  const int64_t samples_;
  const int64_t classes_;
  const int64_t ignore_index_;
  const bool bfloat16_;
  CudaStreamContext* const stream_;
  BadValueReport report_;
};

// embedding_grad.
template <typename Id>
class EmbeddingGradKernelImpl final : public Kernel {
 public:
  EmbeddingGradKernelImpl(const KernelInit& init, int64_t width,
                          const cpu::EmbeddingRowRange& row_range, bool bfloat16,
                          CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        ids_shape_(Shape::FromProto(init.inputs[0])),
        count_(ids_shape_.NumElements()),
        width_(width),
        row_range_(row_range),
        bfloat16_(bfloat16),
        stream_(stream) {}
  ~EmbeddingGradKernelImpl() override {
    for (void* buffer : {static_cast<void*>(keys_), static_cast<void*>(sorted_keys_),
                         static_cast<void*>(positions_), static_cast<void*>(sorted_positions_),
                         static_cast<void*>(row_start_), temporary_}) {
      if (buffer != nullptr) cudaFree(buffer);
    }
  }

  absl::Status Allocate() {
    const std::string what = What(task_name_, kEmbeddingGrad);
    if (absl::Status status = report_.Allocate(stream_->stream(), what); !status.ok()) {
      return status;
    }
    if (count_ == 0) return absl::OkStatus();
    const size_t bytes = static_cast<size_t>(count_) * 4;
    for (void** buffer :
         {reinterpret_cast<void**>(&keys_), reinterpret_cast<void**>(&sorted_keys_),
          reinterpret_cast<void**>(&positions_), reinterpret_cast<void**>(&sorted_positions_)}) {
      if (absl::Status status = CudaStatus(cudaMalloc(buffer, bytes), what); !status.ok()) {
        return status;
      }
    }
    if (absl::Status status = CudaStatus(
            cudaMalloc(&row_start_, static_cast<size_t>(row_range_.rows + 2) * sizeof(int32_t)),
            what);
        !status.ok()) {
      return status;
    }
    if (absl::Status status =
            CudaStatus(cub::DeviceRadixSort::SortPairs(nullptr, temporary_bytes_, keys_,
                                                       sorted_keys_, positions_, sorted_positions_,
                                                       static_cast<int>(count_), 0, KeyBits()),
                       what);
        !status.ok()) {
      return status;
    }
    return CudaStatus(cudaMalloc(&temporary_, std::max<size_t>(temporary_bytes_, 1)), what);
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = report_.Check(task_name_, stream_->stream(),
                                            [this](int64_t position, int64_t id) {
                                              return row_range_.CheckId(kEmbeddingGrad, id,
                                                                        ids_shape_, position);
                                            });
        !status.ok()) {
      return status;
    }
    if (absl::Status status = signature_.Check(kEmbeddingGrad, context); !status.ok()) {
      return status;
    }
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  // Bits of the keys, which go up to rows (ids of other shards).
  int KeyBits() const {
    int bits = 1;
    while (bits < 32 && (int64_t{1} << bits) <= row_range_.rows) ++bits;
    return bits;
  }

  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const std::string what = What(task_name_, kEmbeddingGrad);
    const cudaStream_t stream = stream_->stream();
    T* dtable = context.outputs[0].Data<T>();
    const int64_t rows = row_range_.rows;
    const int64_t elements = rows * width_;
    if (count_ == 0) {
      if (elements == 0) return absl::OkStatus();
      // Zero bits are 0.0 in float32 and bfloat16 alike.
      return CudaStatus(
          cudaMemsetAsync(dtable, 0, static_cast<size_t>(elements) * sizeof(T), stream), what);
    }
    const Id* ids = context.inputs[0].Data<const Id>();
    EmbeddingKeysKernel<Id><<<static_cast<int>(BlocksFor(count_, kThreads)), kThreads, 0, stream>>>(
        ids, count_, row_range_.logical_rows, row_range_.row_offset, rows, keys_, positions_,
        report_.act());
    if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    if (elements > 0) {
      size_t bytes = temporary_bytes_;
      if (absl::Status status =
              CudaStatus(cub::DeviceRadixSort::SortPairs(
                             temporary_, bytes, keys_, sorted_keys_, positions_, sorted_positions_,
                             static_cast<int>(count_), 0, KeyBits(), stream),
                         what);
          !status.ok()) {
        return status;
      }
      EmbeddingRowStartsKernel<<<static_cast<int>(BlocksFor(count_ + 1, kThreads)), kThreads, 0,
                                 stream>>>(sorted_keys_, count_, rows, row_start_);
      if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
      EmbeddingAccumulateKernel<T>
          <<<static_cast<int>(BlocksFor(elements, kThreads)), kThreads, 0, stream>>>(
              context.inputs[1].Data<const T>(), sorted_positions_, row_start_, rows, width_,
              dtable);
      if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    }
    return report_.Publish(ids, stream, what);
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const Shape ids_shape_;
  const int64_t count_;
  const int64_t width_;
  const cpu::EmbeddingRowRange row_range_;
  const bool bfloat16_;
  CudaStreamContext* const stream_;
  BadValueReport report_;
  // Scratch: the positions' keys (local rows), both sorted by key, and where each row's run
  // starts.
  uint32_t* keys_ = nullptr;
  uint32_t* sorted_keys_ = nullptr;
  int32_t* positions_ = nullptr;
  int32_t* sorted_positions_ = nullptr;
  int32_t* row_start_ = nullptr;
  void* temporary_ = nullptr;
  size_t temporary_bytes_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Factories.

absl::StatusOr<std::unique_ptr<Kernel>> CreateRowGrad(
    const KernelInit& init, const char* op_type, bool log,
    absl::StatusOr<std::unique_ptr<Kernel>> (*cpu_factory)(const KernelInit&)) {
  absl::StatusOr<bool> bfloat16 = CheckLikeCpu(op_type, init, cpu_factory);
  if (!bfloat16.ok()) return bfloat16.status();
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  const Shape y = Shape::FromProto(init.inputs[0]);
  return std::make_unique<RowGradKernelImpl>(init, op_type, log, y.dimension(y.rank() - 1),
                                             *bfloat16, *stream);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxGradKernel(const KernelInit& init) {
  return CreateRowGrad(init, kSoftmaxGrad, /*log=*/false, cpu::CreateSoftmaxGradKernel);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateLogSoftmaxGradKernel(const KernelInit& init) {
  return CreateRowGrad(init, kLogSoftmaxGrad, /*log=*/true, cpu::CreateLogSoftmaxGradKernel);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateLayerNormGradKernel(const KernelInit& init) {
  absl::StatusOr<bool> bfloat16 =
      CheckLikeCpu(kLayerNormGrad, init, cpu::CreateLayerNormGradKernel);
  if (!bfloat16.ok()) return bfloat16.status();
  absl::StatusOr<double> epsilon = Attributes(*init.conf).GetFloat("epsilon", 1e-5);
  if (!epsilon.ok()) return cpu::WithOpType(kLayerNormGrad, epsilon.status());
  const Shape x = Shape::FromProto(init.inputs[0]);
  const int64_t n = x.dimension(x.rank() - 1);
  const int64_t rows = n == 0 ? 0 : x.NumElements() / n;
  if (rows > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kLayerNormGrad, ": the CUDA kernel handles fewer than 2^31 rows, not ", rows));
  }
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return Allocated(
      std::make_unique<LayerNormGradKernelImpl>(init, rows, n, *epsilon, *bfloat16, *stream));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSparseCrossEntropyGradKernel(const KernelInit& init) {
  absl::StatusOr<bool> bfloat16 =
      CheckLikeCpu(kCrossEntropyGrad, init, cpu::CreateSparseCrossEntropyGradKernel);
  if (!bfloat16.ok()) return bfloat16.status();
  absl::StatusOr<int64_t> ignore_index = Attributes(*init.conf).GetInt("ignore_index", -100);
  if (!ignore_index.ok()) return cpu::WithOpType(kCrossEntropyGrad, ignore_index.status());
  const Shape logits = Shape::FromProto(init.inputs[0]);
  const int64_t classes = logits.dimension(logits.rank() - 1);
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  if (init.inputs[1].data_type() == plan::INT32) {
    return Allocated(std::make_unique<CrossEntropyGradKernelImpl<int32_t>>(
        init, classes, *ignore_index, *bfloat16, *stream));
  }
  return Allocated(std::make_unique<CrossEntropyGradKernelImpl<int64_t>>(
      init, classes, *ignore_index, *bfloat16, *stream));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateEmbeddingGradKernel(const KernelInit& init) {
  absl::StatusOr<bool> bfloat16 =
      CheckLikeCpu(kEmbeddingGrad, init, cpu::CreateEmbeddingGradKernel);
  if (!bfloat16.ok()) return bfloat16.status();
  const Shape table = Shape::FromProto(init.outputs[0]);
  const int64_t rows = table.dimension(0);
  const int64_t width = table.dimension(1);
  absl::StatusOr<cpu::EmbeddingRowRange> row_range =
      cpu::ReadEmbeddingRowRange(kEmbeddingGrad, init, rows);
  if (!row_range.ok()) return row_range.status();
  const int64_t count = Shape::FromProto(init.inputs[0]).NumElements();
  // Positions and row starts are int32, keys uint32 up to rows.
  constexpr int64_t kLimit = std::numeric_limits<int32_t>::max() - 2;
  if (count >= kLimit || rows >= kLimit) {
    return absl::InvalidArgumentError(
        absl::StrCat(kEmbeddingGrad, ": the CUDA kernel handles fewer than 2^31 ids and table ",
                     "rows, not ", count, " ids and ", rows, " rows"));
  }
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  if (init.inputs[0].data_type() == plan::INT32) {
    return Allocated(std::make_unique<EmbeddingGradKernelImpl<int32_t>>(init, width, *row_range,
                                                                        *bfloat16, *stream));
  }
  return Allocated(std::make_unique<EmbeddingGradKernelImpl<int64_t>>(init, width, *row_range,
                                                                      *bfloat16, *stream));
}

}  // namespace

absl::Status RegisterCudaRowGradientKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {kSoftmaxGrad, CreateSoftmaxGradKernel},
      {kLogSoftmaxGrad, CreateLogSoftmaxGradKernel},
      {kLayerNormGrad, CreateLayerNormGradKernel},
      {kCrossEntropyGrad, CreateSparseCrossEntropyGradKernel},
      {kEmbeddingGrad, CreateEmbeddingGradKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
