#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/attributes.h"
#include "kernels/cpu/cross_entropy_kernel.h"
#include "kernels/cpu/cross_entropy_rows.h"
#include "kernels/cpu/embedding_kernel.h"
#include "kernels/cpu/embedding_row_range.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/layer_norm_kernel.h"
#include "kernels/cpu/reduce_kernels.h"
#include "kernels/cpu/softmax_kernel.h"
#include "kernels/cuda/bad_value_report.cuh"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/cuda/row_kernels.h"
#include "kernels/cuda/row_reductions.cuh"
#include "runtime/cuda/cuda_status.h"
#include "runtime/tensor.h"

namespace loom::cuda {
namespace {

constexpr char kSoftmax[] = "softmax";
constexpr char kLogSoftmax[] = "log_softmax";
constexpr char kLayerNorm[] = "layer_norm";
constexpr char kCrossEntropy[] = "sparse_cross_entropy";
constexpr char kEmbedding[] = "embedding";
constexpr char kReduceSum[] = "reduce_sum";
constexpr char kReduceMean[] = "reduce_mean";

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
// Rows of up to this many elements get one warp each; longer rows a block.
constexpr int64_t kWarpRowLimit = 256;

// ---------------------------------------------------------------------------------------------
// Device side.

// The threads that work on one row together: a warp (kWarp; the block's warps take different
// rows) or the whole block. Rows are visited from `first` in steps of `stride`; each thread takes
// the row's elements lane, lane + size, ...
template <bool kWarp>
struct RowGroup {
  int64_t first;
  int64_t stride;
  int lane;
  int size;

  __device__ __forceinline__ RowGroup() {
    if constexpr (kWarp) {
      const int warps = static_cast<int>(blockDim.x >> 5);
      first = static_cast<int64_t>(blockIdx.x) * warps + (threadIdx.x >> 5);
      stride = static_cast<int64_t>(gridDim.x) * warps;
      lane = static_cast<int>(threadIdx.x & 31);
      size = 32;
    } else {
      first = blockIdx.x;
      stride = gridDim.x;
      lane = static_cast<int>(threadIdx.x);
      size = static_cast<int>(blockDim.x);
    }
  }

  __device__ __forceinline__ float Sum(float value, float* shared) const {
    if constexpr (kWarp) {
      return WarpSum(value);
    } else {
      return BlockSum(value, shared);
    }
  }

  __device__ __forceinline__ float Max(float value, float* shared) const {
    if constexpr (kWarp) {
      return WarpMax(value);
    } else {
      return BlockMax(value, shared);
    }
  }
};

// softmax (y = exp(x - max) / sum) or log_softmax (y = (x - max) - log(sum)) of rows of n > 0.
template <typename T, bool kLog, bool kWarp>
__global__ void __launch_bounds__(kMaxRowThreads)
    SoftmaxKernel(const T* __restrict__ x, int64_t rows, int64_t n, T* __restrict__ y) {
  __shared__ float shared[32];
  const RowGroup<kWarp> group;
  for (int64_t row = group.first; row < rows; row += group.stride) {
    const T* x_row = x + row * n;
    T* y_row = y + row * n;
    float partial = -INFINITY;
    for (int64_t i = group.lane; i < n; i += group.size)
      partial = fmaxf(partial, ToFloat(x_row[i]));
    const float maximum = group.Max(partial, shared);
    partial = 0.0f;
    for (int64_t i = group.lane; i < n; i += group.size) {
      partial += expf(ToFloat(x_row[i]) - maximum);
    }
    const float sum = group.Sum(partial, shared);
    if constexpr (kLog) {
      // As the CPU: the shift first, so that large inputs keep their precision.
      const float log_sum = static_cast<float>(log(static_cast<double>(sum)));
      for (int64_t i = group.lane; i < n; i += group.size) {
        y_row[i] = FromFloat<T>((ToFloat(x_row[i]) - maximum) - log_sum);
      }
    } else {
      const float inverse_sum = static_cast<float>(1.0 / static_cast<double>(sum));
      for (int64_t i = group.lane; i < n; i += group.size) {
        y_row[i] = FromFloat<T>(expf(ToFloat(x_row[i]) - maximum) * inverse_sum);
      }
    }
  }
}

// layer_norm of rows of n: the mean, then the biased variance from the squared deviations (two
// passes, as the CPU), y = (x - mean) * rstd * gamma + beta. `means` and `rstds` (when not null)
// get the rows' statistics; rows of n = 0 have mean 0 and rstd 1 / sqrt(epsilon), as on the CPU.
template <typename T, bool kWarp>
__global__ void __launch_bounds__(kMaxRowThreads)
    LayerNormKernel(const T* __restrict__ x, const T* __restrict__ gamma,
                    const T* __restrict__ beta, int64_t rows, int64_t n, double epsilon,
                    T* __restrict__ y, T* __restrict__ means, T* __restrict__ rstds) {
  __shared__ float shared[32];
  const RowGroup<kWarp> group;
  for (int64_t row = group.first; row < rows; row += group.stride) {
    const T* x_row = x + row * n;
    T* y_row = y + row * n;
    float mean = 0.0f;
    float rstd = static_cast<float>(1.0 / sqrt(epsilon));
    if (n > 0) {
      float partial = 0.0f;
      for (int64_t i = group.lane; i < n; i += group.size) partial += ToFloat(x_row[i]);
      const float sum = group.Sum(partial, shared);
      mean = static_cast<float>(static_cast<double>(sum) / static_cast<double>(n));
      partial = 0.0f;
      for (int64_t i = group.lane; i < n; i += group.size) {
        const float centred = ToFloat(x_row[i]) - mean;
        partial += centred * centred;
      }
      const float squares = group.Sum(partial, shared);
      rstd = static_cast<float>(
          1.0 / sqrt(static_cast<double>(squares) / static_cast<double>(n) + epsilon));
      for (int64_t i = group.lane; i < n; i += group.size) {
        y_row[i] =
            FromFloat<T>((ToFloat(x_row[i]) - mean) * rstd * ToFloat(gamma[i]) + ToFloat(beta[i]));
      }
    }
    if (means != nullptr && group.lane == 0) {
      means[row] = FromFloat<T>(mean);
      rstds[row] = FromFloat<T>(rstd);
    }
  }
}

// sparse_cross_entropy, one row of logits per sample: loss = (max - logits[label]) + log(sum of
// exp(logits - max)); 0 for ignored samples. A label out of range records its sample in `act_bad`
// (the smallest such sample wins, as the CPU reports the first) and gets a NaN loss: the next act
// reports it.
template <typename T, typename Label, bool kWarp>
__global__ void __launch_bounds__(kMaxRowThreads)
    CrossEntropyKernel(const T* __restrict__ logits, const Label* __restrict__ labels,
                       int64_t samples, int64_t classes, int64_t ignore_index, T* __restrict__ loss,
                       unsigned long long* act_bad) {
  __shared__ float shared[32];
  const RowGroup<kWarp> group;
  for (int64_t sample = group.first; sample < samples; sample += group.stride) {
    const int64_t label = static_cast<int64_t>(labels[sample]);
    if (label == ignore_index) {
      if (group.lane == 0) loss[sample] = FromFloat<T>(0.0f);
      continue;
    }
    if (label < 0 || label >= classes) {
      if (group.lane == 0) {
        atomicMin(act_bad, static_cast<unsigned long long>(sample));
        loss[sample] = FromFloat<T>(NAN);
      }
      continue;
    }
    const T* row = logits + sample * classes;
    float partial = -INFINITY;
    for (int64_t i = group.lane; i < classes; i += group.size) {
      partial = fmaxf(partial, ToFloat(row[i]));
    }
    const float maximum = group.Max(partial, shared);
    partial = 0.0f;
    for (int64_t i = group.lane; i < classes; i += group.size) {
      partial += expf(ToFloat(row[i]) - maximum);
    }
    const float sum = group.Sum(partial, shared);
    if (group.lane == 0) {
      const double value =
          (static_cast<double>(maximum) - static_cast<double>(ToFloat(row[label]))) +
          log(static_cast<double>(sum));
      loss[sample] = FromFloat<T>(static_cast<float>(value));
    }
  }
}

// embedding, one warp per position: the table's row for the id, zeros when another shard holds
// it. An id outside [0, logical_rows) records its position in `act_bad` (smallest wins) and gets
// a row of NaN: the next act reports it.
template <typename T, typename Id>
__global__ void EmbeddingKernel(const T* __restrict__ table, const Id* __restrict__ ids,
                                int64_t count, int64_t width, int64_t rows, int64_t row_offset,
                                int64_t logical_rows, T* __restrict__ output,
                                unsigned long long* act_bad) {
  const RowGroup<true> group;
  for (int64_t position = group.first; position < count; position += group.stride) {
    const int64_t id = static_cast<int64_t>(ids[position]);
    T* out = output + position * width;
    if (id < 0 || id >= logical_rows) {
      if (group.lane == 0) atomicMin(act_bad, static_cast<unsigned long long>(position));
      for (int64_t i = group.lane; i < width; i += 32) out[i] = FromFloat<T>(NAN);
      continue;
    }
    const int64_t local = id - row_offset;
    if (local >= 0 && local < rows) {
      const T* source = table + local * width;
      for (int64_t i = group.lane; i < width; i += 32) out[i] = source[i];
    } else {
      for (int64_t i = group.lane; i < width; i += 32) out[i] = FromFloat<T>(0.0f);
    }
  }
}

// The offset of row-major element `index` of `dimensions` (rank entries) in a tensor with element
// strides `strides`.
__device__ __forceinline__ int64_t OffsetOf(int64_t index, int rank, const int64_t* dimensions,
                                            const int64_t* strides) {
  if (rank == 1) return index * strides[0];
  int64_t offset = 0;
  for (int axis = rank - 1; axis >= 0; --axis) {
    const int64_t dimension = dimensions[axis];
    const int64_t quotient = index / dimension;
    offset += (index - quotient * dimension) * strides[axis];
    index = quotient;
  }
  return offset;
}

// What a reduction kernel walks: `outputs` output elements, each the sum of `reduced` input
// elements, split into chunks of `chunk_length` (blockIdx.y is the chunk). The table (GPU memory)
// holds the kept axes' dimensions and input strides, then the reduced axes' dimensions and input
// strides, outermost first.
struct ReduceWalk {
  int64_t outputs;
  int64_t reduced;
  int64_t chunk_length;
  int kept_rank;
  int reduced_rank;
};

// Copies the walk's table to shared memory (2 * (kept_rank + reduced_rank) int64 values).
__device__ __forceinline__ void LoadTable(const ReduceWalk& walk, const int64_t* table,
                                          int64_t* shared_table) {
  const int entries = 2 * (walk.kept_rank + walk.reduced_rank);
  for (int entry = static_cast<int>(threadIdx.x); entry < entries;
       entry += static_cast<int>(blockDim.x)) {
    shared_table[entry] = table[entry];
  }
  __syncthreads();
}

// Reductions whose innermost input axis is reduced: a group (warp or block) per output element
// and chunk, its threads across the chunk's reduced elements (contiguous innermost). The chunk's
// sum goes to partials[chunk * outputs + output] when partials is not null; otherwise (one chunk)
// to the output, times `multiplier`.
template <typename T, bool kWarp>
__global__ void __launch_bounds__(kMaxRowThreads)
    ReduceRowsKernel(const T* __restrict__ input, ReduceWalk walk, const int64_t* table,
                     double multiplier, T* __restrict__ output, double* __restrict__ partials) {
  extern __shared__ int64_t shared_table[];
  __shared__ float shared[32];
  LoadTable(walk, table, shared_table);
  const int64_t* kept_dimensions = shared_table;
  const int64_t* kept_strides = shared_table + walk.kept_rank;
  const int64_t* reduced_dimensions = shared_table + 2 * walk.kept_rank;
  const int64_t* reduced_strides = reduced_dimensions + walk.reduced_rank;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * walk.chunk_length;
  const int64_t end = min(begin + walk.chunk_length, walk.reduced);
  const RowGroup<kWarp> group;
  for (int64_t index = group.first; index < walk.outputs; index += group.stride) {
    const T* base = input + OffsetOf(index, walk.kept_rank, kept_dimensions, kept_strides);
    float partial = 0.0f;
    for (int64_t r = begin + group.lane; r < end; r += group.size) {
      partial += ToFloat(base[OffsetOf(r, walk.reduced_rank, reduced_dimensions, reduced_strides)]);
    }
    const float sum = group.Sum(partial, shared);
    if (group.lane == 0) {
      if (partials != nullptr) {
        partials[chunk * walk.outputs + index] = static_cast<double>(sum);
      } else {
        output[index] = FromFloat<T>(static_cast<float>(static_cast<double>(sum) * multiplier));
      }
    }
  }
}

// Reductions whose innermost input axis is kept: a thread per output element and chunk (threads
// of a warp read neighbouring elements), adding the chunk's elements in order, in double.
template <typename T>
__global__ void ReduceColumnsKernel(const T* __restrict__ input, ReduceWalk walk,
                                    const int64_t* table, double multiplier, T* __restrict__ output,
                                    double* __restrict__ partials) {
  extern __shared__ int64_t shared_table[];
  LoadTable(walk, table, shared_table);
  const int64_t* kept_dimensions = shared_table;
  const int64_t* kept_strides = shared_table + walk.kept_rank;
  const int64_t* reduced_dimensions = shared_table + 2 * walk.kept_rank;
  const int64_t* reduced_strides = reduced_dimensions + walk.reduced_rank;
  const int64_t chunk = blockIdx.y;
  const int64_t begin = chunk * walk.chunk_length;
  const int64_t end = min(begin + walk.chunk_length, walk.reduced);
  for (int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       index < walk.outputs; index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T* base = input + OffsetOf(index, walk.kept_rank, kept_dimensions, kept_strides);
    double sum = 0.0;
    for (int64_t r = begin; r < end; ++r) {
      sum += ToFloat(base[OffsetOf(r, walk.reduced_rank, reduced_dimensions, reduced_strides)]);
    }
    if (partials != nullptr) {
      partials[chunk * walk.outputs + index] = sum;
    } else {
      output[index] = FromFloat<T>(static_cast<float>(sum * multiplier));
    }
  }
}

// Each output element: its chunks' partial sums added in chunk order, times `multiplier`.
template <typename T>
__global__ void ReduceChunksKernel(const double* __restrict__ partials, int64_t chunks,
                                   int64_t outputs, double multiplier, T* __restrict__ output) {
  for (int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; index < outputs;
       index += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sum = 0.0;
    for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += partials[chunk * outputs + index];
    output[index] = FromFloat<T>(static_cast<float>(sum * multiplier));
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// How `rows` rows of n are launched: a warp per row for short rows (kThreads-thread blocks), a
// block per row otherwise.
struct RowLaunch {
  bool warp;
  int blocks;
  int threads;
};

RowLaunch RowLaunchFor(int64_t rows, int64_t n) {
  if (n <= kWarpRowLimit) {
    const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    return {true, static_cast<int>(std::clamp<int64_t>(blocks, 1, kMaxRowBlocks)), kThreads};
  }
  return {false, static_cast<int>(std::clamp<int64_t>(rows, 1, kMaxRowBlocks)), RowThreads(n)};
}

// softmax and log_softmax.
class SoftmaxKernelImpl final : public Kernel {
 public:
  SoftmaxKernelImpl(const KernelInit& init, const char* op_type, bool log, int64_t n, bool bfloat16,
                    CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        op_type_(op_type),
        log_(log),
        n_(n),
        rows_(n == 0 ? 0 : Shape::FromProto(init.inputs[0]).NumElements() / n),
        bfloat16_(bfloat16),
        stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(op_type_, context); !status.ok()) return status;
    if (rows_ == 0) return absl::OkStatus();
    if (bfloat16_) {
      return log_ ? Run<__nv_bfloat16, true>(context) : Run<__nv_bfloat16, false>(context);
    }
    return log_ ? Run<float, true>(context) : Run<float, false>(context);
  }

 private:
  template <typename T, bool kLog>
  absl::Status Run(const KernelContext& context) {
    const RowLaunch launch = RowLaunchFor(rows_, n_);
    const T* x = context.inputs[0].Data<const T>();
    T* y = context.outputs[0].Data<T>();
    if (launch.warp) {
      SoftmaxKernel<T, kLog, true>
          <<<launch.blocks, launch.threads, 0, stream_->stream()>>>(x, rows_, n_, y);
    } else {
      SoftmaxKernel<T, kLog, false>
          <<<launch.blocks, launch.threads, 0, stream_->stream()>>>(x, rows_, n_, y);
    }
    return LaunchStatus(What(task_name_, op_type_));
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const char* const op_type_;
  const bool log_;
  const int64_t n_;
  const int64_t rows_;
  const bool bfloat16_;
  CudaStreamContext* const stream_;
};

// layer_norm.
class LayerNormKernelImpl final : public Kernel {
 public:
  LayerNormKernelImpl(const KernelInit& init, int64_t rows, int64_t n, double epsilon,
                      bool bfloat16, CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        rows_(rows),
        n_(n),
        epsilon_(epsilon),
        statistics_(init.outputs.size() == 3),
        bfloat16_(bfloat16),
        stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kLayerNorm, context); !status.ok()) return status;
    // Rows of nothing still have statistics when they are written.
    if (rows_ == 0 || (n_ == 0 && !statistics_)) return absl::OkStatus();
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const RowLaunch launch = RowLaunchFor(rows_, n_);
    const T* x = context.inputs[0].Data<const T>();
    const T* gamma = context.inputs[1].Data<const T>();
    const T* beta = context.inputs[2].Data<const T>();
    T* y = context.outputs[0].Data<T>();
    T* means = statistics_ ? context.outputs[1].Data<T>() : nullptr;
    T* rstds = statistics_ ? context.outputs[2].Data<T>() : nullptr;
    if (launch.warp) {
      LayerNormKernel<T, true><<<launch.blocks, launch.threads, 0, stream_->stream()>>>(
          x, gamma, beta, rows_, n_, epsilon_, y, means, rstds);
    } else {
      LayerNormKernel<T, false><<<launch.blocks, launch.threads, 0, stream_->stream()>>>(
          x, gamma, beta, rows_, n_, epsilon_, y, means, rstds);
    }
    return LaunchStatus(What(task_name_, kLayerNorm));
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const int64_t rows_;
  const int64_t n_;
  const double epsilon_;
  // Whether outputs 1 and 2 (mean and rstd) are written.
  const bool statistics_;
  const bool bfloat16_;
  CudaStreamContext* const stream_;
};

// sparse_cross_entropy.
template <typename Label>
class CrossEntropyKernelImpl final : public Kernel {
 public:
  CrossEntropyKernelImpl(const KernelInit& init, int64_t classes, int64_t ignore_index,
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
    return report_.Allocate(stream_->stream(), What(task_name_, kCrossEntropy));
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = report_.Check(task_name_, stream_->stream(),
                                            [this](int64_t sample, int64_t label) {
                                              return cpu::CheckSparseLabel(kCrossEntropy, label,
                                                                           classes_, ignore_index_,
                                                                           labels_shape_, sample);
                                            });
        !status.ok()) {
      return status;
    }
    if (absl::Status status = signature_.Check(kCrossEntropy, context); !status.ok()) {
      return status;
    }
    if (samples_ == 0) return absl::OkStatus();
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const std::string what = What(task_name_, kCrossEntropy);
    const cudaStream_t stream = stream_->stream();
    const RowLaunch launch = RowLaunchFor(samples_, classes_);
    const T* logits = context.inputs[0].Data<const T>();
    const Label* labels = context.inputs[1].Data<const Label>();
    T* loss = context.outputs[0].Data<T>();
    if (launch.warp) {
      CrossEntropyKernel<T, Label, true><<<launch.blocks, launch.threads, 0, stream>>>(
          logits, labels, samples_, classes_, ignore_index_, loss, report_.act());
    } else {
      CrossEntropyKernel<T, Label, false><<<launch.blocks, launch.threads, 0, stream>>>(
          logits, labels, samples_, classes_, ignore_index_, loss, report_.act());
    }
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

// embedding.
template <typename Id>
class EmbeddingKernelImpl final : public Kernel {
 public:
  EmbeddingKernelImpl(const KernelInit& init, int64_t width,
                      const cpu::EmbeddingRowRange& row_range, bool bfloat16,
                      CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        ids_shape_(Shape::FromProto(init.inputs[1])),
        count_(ids_shape_.NumElements()),
        width_(width),
        row_range_(row_range),
        bfloat16_(bfloat16),
        stream_(stream) {}

  absl::Status Allocate() {
    return report_.Allocate(stream_->stream(), What(task_name_, kEmbedding));
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = report_.Check(task_name_, stream_->stream(),
                                            [this](int64_t position, int64_t id) {
                                              return row_range_.CheckId(kEmbedding, id, ids_shape_,
                                                                        position);
                                            });
        !status.ok()) {
      return status;
    }
    if (absl::Status status = signature_.Check(kEmbedding, context); !status.ok()) return status;
    if (count_ == 0) return absl::OkStatus();
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const std::string what = What(task_name_, kEmbedding);
    const cudaStream_t stream = stream_->stream();
    const Id* ids = context.inputs[1].Data<const Id>();
    // A warp per position.
    const int blocks = static_cast<int>(BlocksFor(count_ * 32, kThreads));
    EmbeddingKernel<T, Id><<<blocks, kThreads, 0, stream>>>(
        context.inputs[0].Data<const T>(), ids, count_, width_, row_range_.rows,
        row_range_.row_offset, row_range_.logical_rows, context.outputs[0].Data<T>(),
        report_.act());
    if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
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
};

// How a reduction walks its input, planned once as the CPU plans it: axes of size 1 dropped,
// neighbouring axes that are both reduced or both kept merged. The output is the kept axes in
// order, row-major.
struct ReduceLayout {
  std::vector<int64_t> kept_dimensions;
  std::vector<int64_t> kept_strides;
  std::vector<int64_t> reduced_dimensions;
  std::vector<int64_t> reduced_strides;
  int64_t outputs = 1;
  int64_t reduced = 1;
  // Whether the innermost (contiguous) merged axis is reduced.
  bool inner_reduced = false;
};

ReduceLayout MakeReduceLayout(const Shape& input, const std::vector<bool>& reduced_axes) {
  std::vector<int64_t> dimensions;
  std::vector<bool> reduced;
  for (int axis = 0; axis < input.rank(); ++axis) {
    const int64_t dimension = input.dimension(axis);
    if (dimension == 1) continue;
    if (!dimensions.empty() && reduced.back() == reduced_axes[axis]) {
      dimensions.back() *= dimension;
      continue;
    }
    dimensions.push_back(dimension);
    reduced.push_back(reduced_axes[axis]);
  }
  if (dimensions.empty()) {
    dimensions.push_back(1);
    reduced.push_back(false);
  }
  const size_t rank = dimensions.size();
  std::vector<int64_t> strides(rank, 1);
  for (size_t axis = rank - 1; axis-- > 0;)
    strides[axis] = strides[axis + 1] * dimensions[axis + 1];
  ReduceLayout layout;
  for (size_t axis = 0; axis < rank; ++axis) {
    if (reduced[axis]) {
      layout.reduced_dimensions.push_back(dimensions[axis]);
      layout.reduced_strides.push_back(strides[axis]);
      layout.reduced *= dimensions[axis];
    } else {
      layout.kept_dimensions.push_back(dimensions[axis]);
      layout.kept_strides.push_back(strides[axis]);
      layout.outputs *= dimensions[axis];
    }
  }
  layout.inner_reduced = reduced.back();
  return layout;
}

// reduce_sum and reduce_mean.
class ReduceKernelImpl final : public Kernel {
 public:
  // About this many blocks keep the GPU busy; fewer outputs split their reductions into chunks.
  static constexpr int64_t kTargetBlocks = 1024;
  // The shortest chunk of a reduction over contiguous rows, and over strided columns.
  static constexpr int64_t kMinRowChunk = 4096;
  static constexpr int64_t kMinColumnChunk = 64;

  ReduceKernelImpl(const KernelInit& init, const char* op_type, ReduceLayout layout,
                   double multiplier, bool bfloat16, CudaStreamContext* stream)
      : task_name_(init.task_name),
        signature_(init),
        op_type_(op_type),
        layout_(std::move(layout)),
        multiplier_(multiplier),
        bfloat16_(bfloat16),
        stream_(stream) {
    const int64_t outputs = layout_.outputs;
    const int64_t reduced = layout_.reduced;
    int64_t chunks = 1;
    if (layout_.inner_reduced) {
      if (reduced > kMinRowChunk && outputs < kTargetBlocks) {
        chunks = std::min((reduced + kMinRowChunk - 1) / kMinRowChunk,
                          (kTargetBlocks + outputs - 1) / outputs);
      }
    } else {
      const int64_t column_blocks = (outputs + kThreads - 1) / kThreads;
      if (reduced > kMinColumnChunk && column_blocks < kTargetBlocks) {
        chunks = std::min((reduced + kMinColumnChunk - 1) / kMinColumnChunk,
                          (kTargetBlocks + column_blocks - 1) / column_blocks);
      }
    }
    chunk_length_ = (reduced + chunks - 1) / chunks;
    chunks_ = chunk_length_ == 0 ? 1 : (reduced + chunk_length_ - 1) / chunk_length_;
    for (const std::vector<int64_t>* part :
         {&layout_.kept_dimensions, &layout_.kept_strides, &layout_.reduced_dimensions,
          &layout_.reduced_strides}) {
      host_table_.insert(host_table_.end(), part->begin(), part->end());
    }
  }
  ~ReduceKernelImpl() override {
    if (table_ != nullptr) cudaFree(table_);
    if (partials_ != nullptr) cudaFree(partials_);
  }

  // The index table (copied once, on the stream, so that every act sees it; host_table_ stays
  // with the kernel) and the chunks' partial sums.
  absl::Status Allocate() {
    const std::string what = What(task_name_, op_type_);
    const size_t bytes = std::max<size_t>(host_table_.size(), 1) * sizeof(int64_t);
    if (absl::Status status = CudaStatus(cudaMalloc(&table_, bytes), what); !status.ok()) {
      table_ = nullptr;
      return status;
    }
    if (absl::Status status = CudaStatus(
            cudaMemcpyAsync(table_, host_table_.data(), host_table_.size() * sizeof(int64_t),
                            cudaMemcpyHostToDevice, stream_->stream()),
            what);
        !status.ok()) {
      return status;
    }
    if (chunks_ == 1) return absl::OkStatus();
    const size_t partial_bytes = static_cast<size_t>(chunks_ * layout_.outputs) * sizeof(double);
    if (absl::Status status = CudaStatus(cudaMalloc(&partials_, partial_bytes), what);
        !status.ok()) {
      partials_ = nullptr;
      return status;
    }
    return absl::OkStatus();
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(op_type_, context); !status.ok()) return status;
    if (layout_.outputs == 0) return absl::OkStatus();
    return bfloat16_ ? Run<__nv_bfloat16>(context) : Run<float>(context);
  }

 private:
  template <typename T>
  absl::Status Run(const KernelContext& context) {
    const std::string what = What(task_name_, op_type_);
    const cudaStream_t stream = stream_->stream();
    const T* input = context.inputs[0].Data<const T>();
    T* output = context.outputs[0].Data<T>();
    const ReduceWalk walk{layout_.outputs, layout_.reduced, chunk_length_,
                          static_cast<int>(layout_.kept_dimensions.size()),
                          static_cast<int>(layout_.reduced_dimensions.size())};
    const size_t shared_bytes = host_table_.size() * sizeof(int64_t);
    double* partials = chunks_ > 1 ? partials_ : nullptr;
    if (layout_.inner_reduced) {
      const RowLaunch launch = RowLaunchFor(layout_.outputs, chunk_length_);
      const dim3 grid(static_cast<unsigned int>(launch.blocks), static_cast<unsigned int>(chunks_));
      if (launch.warp) {
        ReduceRowsKernel<T, true><<<grid, launch.threads, shared_bytes, stream>>>(
            input, walk, table_, multiplier_, output, partials);
      } else {
        ReduceRowsKernel<T, false><<<grid, launch.threads, shared_bytes, stream>>>(
            input, walk, table_, multiplier_, output, partials);
      }
    } else {
      const dim3 grid(static_cast<unsigned int>(BlocksFor(layout_.outputs, kThreads)),
                      static_cast<unsigned int>(chunks_));
      ReduceColumnsKernel<T><<<grid, kThreads, shared_bytes, stream>>>(
          input, walk, table_, multiplier_, output, partials);
    }
    if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    if (partials == nullptr) return absl::OkStatus();
    ReduceChunksKernel<T>
        <<<static_cast<int>(BlocksFor(layout_.outputs, kThreads)), kThreads, 0, stream>>>(
            partials, chunks_, layout_.outputs, multiplier_, output);
    return LaunchStatus(what);
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const char* const op_type_;
  const ReduceLayout layout_;
  // 1 for a sum, 1 / divisor for a mean (NaN for a mean of nothing).
  const double multiplier_;
  const bool bfloat16_;
  CudaStreamContext* const stream_;
  int64_t chunk_length_ = 0;
  int64_t chunks_ = 1;
  std::vector<int64_t> host_table_;
  // GPU memory: the index table, and the chunks' partial sums [chunks, outputs] when split.
  int64_t* table_ = nullptr;
  double* partials_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Factories.

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxLike(
    const KernelInit& init, const char* op_type, bool log,
    absl::StatusOr<std::unique_ptr<Kernel>> (*cpu_factory)(const KernelInit&)) {
  absl::StatusOr<bool> bfloat16 = CheckLikeCpu(op_type, init, cpu_factory);
  if (!bfloat16.ok()) return bfloat16.status();
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  const Shape x = Shape::FromProto(init.inputs[0]);
  return std::make_unique<SoftmaxKernelImpl>(init, op_type, log, x.dimension(x.rank() - 1),
                                             *bfloat16, *stream);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmaxKernel(const KernelInit& init) {
  return CreateSoftmaxLike(init, kSoftmax, /*log=*/false, cpu::CreateSoftmaxKernel);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateLogSoftmaxKernel(const KernelInit& init) {
  return CreateSoftmaxLike(init, kLogSoftmax, /*log=*/true, cpu::CreateLogSoftmaxKernel);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateLayerNormKernel(const KernelInit& init) {
  absl::StatusOr<bool> bfloat16 = CheckLikeCpu(kLayerNorm, init, cpu::CreateLayerNormKernel);
  if (!bfloat16.ok()) return bfloat16.status();
  absl::StatusOr<double> epsilon = Attributes(*init.conf).GetFloat("epsilon", 1e-5);
  if (!epsilon.ok()) return cpu::WithOpType(kLayerNorm, epsilon.status());
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  const Shape x = Shape::FromProto(init.inputs[0]);
  const int64_t n = x.dimension(x.rank() - 1);
  const int64_t rows = Shape(x.dimensions().subspan(0, x.rank() - 1)).NumElements();
  return std::make_unique<LayerNormKernelImpl>(init, rows, n, *epsilon, *bfloat16, *stream);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSparseCrossEntropyKernel(const KernelInit& init) {
  absl::StatusOr<bool> bfloat16 =
      CheckLikeCpu(kCrossEntropy, init, cpu::CreateSparseCrossEntropyKernel);
  if (!bfloat16.ok()) return bfloat16.status();
  absl::StatusOr<int64_t> ignore_index = Attributes(*init.conf).GetInt("ignore_index", -100);
  if (!ignore_index.ok()) return cpu::WithOpType(kCrossEntropy, ignore_index.status());
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  const Shape logits = Shape::FromProto(init.inputs[0]);
  const int64_t classes = logits.dimension(logits.rank() - 1);
  if (init.inputs[1].data_type() == plan::INT32) {
    return Allocated(std::make_unique<CrossEntropyKernelImpl<int32_t>>(init, classes, *ignore_index,
                                                                       *bfloat16, *stream));
  }
  return Allocated(std::make_unique<CrossEntropyKernelImpl<int64_t>>(init, classes, *ignore_index,
                                                                     *bfloat16, *stream));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateEmbeddingKernel(const KernelInit& init) {
  absl::StatusOr<bool> bfloat16 = CheckLikeCpu(kEmbedding, init, cpu::CreateEmbeddingKernel);
  if (!bfloat16.ok()) return bfloat16.status();
  const Shape table = Shape::FromProto(init.inputs[0]);
  absl::StatusOr<cpu::EmbeddingRowRange> row_range =
      cpu::ReadEmbeddingRowRange(kEmbedding, init, table.dimension(0));
  if (!row_range.ok()) return row_range.status();
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  const int64_t width = table.dimension(1);
  if (init.inputs[1].data_type() == plan::INT32) {
    return Allocated(std::make_unique<EmbeddingKernelImpl<int32_t>>(init, width, *row_range,
                                                                    *bfloat16, *stream));
  }
  return Allocated(
      std::make_unique<EmbeddingKernelImpl<int64_t>>(init, width, *row_range, *bfloat16, *stream));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateReduce(
    const KernelInit& init, const char* op_type, bool mean,
    absl::StatusOr<std::unique_ptr<Kernel>> (*cpu_factory)(const KernelInit&)) {
  absl::StatusOr<bool> bfloat16 = CheckLikeCpu(op_type, init, cpu_factory);
  if (!bfloat16.ok()) return bfloat16.status();
  // The CPU factory accepted the attributes: read them as it does.
  const Shape input = Shape::FromProto(init.inputs[0]);
  const int rank = input.rank();
  Attributes attributes(*init.conf);
  std::vector<int64_t> axes;
  if (attributes.Has("axes")) {
    absl::StatusOr<std::vector<int64_t>> listed = attributes.GetIntList("axes");
    if (!listed.ok()) return cpu::WithOpType(op_type, listed.status());
    axes = *std::move(listed);
  }
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t axis : axes) reduced[axis < 0 ? axis + rank : axis] = true;
  int64_t reduced_count = 1;
  for (int axis = 0; axis < rank; ++axis) {
    if (reduced[axis]) reduced_count *= input.dimension(axis);
  }
  double multiplier = 1.0;
  if (mean) {
    double divisor = static_cast<double>(reduced_count);
    if (attributes.Has("divisor")) {
      absl::StatusOr<double> given = attributes.GetFloat("divisor");
      if (!given.ok()) return cpu::WithOpType(op_type, given.status());
      divisor = *given;
    }
    // No element reduced (and no divisor): 0 / 0, NaN like any mean of nothing.
    multiplier = divisor > 0.0 ? 1.0 / divisor : std::nan("");
  }
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return Allocated(std::make_unique<ReduceKernelImpl>(
      init, op_type, MakeReduceLayout(input, reduced), multiplier, *bfloat16, *stream));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceSumKernel(const KernelInit& init) {
  return CreateReduce(init, kReduceSum, /*mean=*/false, cpu::CreateReduceSumKernel);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceMeanKernel(const KernelInit& init) {
  return CreateReduce(init, kReduceMean, /*mean=*/true, cpu::CreateReduceMeanKernel);
}

}  // namespace

absl::Status RegisterCudaRowKernels(KernelRegistry* registry) {
  struct Entry {
    const char* op_type;
    absl::StatusOr<std::unique_ptr<Kernel>> (*factory)(const KernelInit&);
  };
  static constexpr Entry kEntries[] = {
      {kSoftmax, CreateSoftmaxKernel},       {kLogSoftmax, CreateLogSoftmaxKernel},
      {kLayerNorm, CreateLayerNormKernel},   {kCrossEntropy, CreateSparseCrossEntropyKernel},
      {kEmbedding, CreateEmbeddingKernel},   {kReduceSum, CreateReduceSumKernel},
      {kReduceMean, CreateReduceMeanKernel},
  };
  for (const Entry& entry : kEntries) {
    if (absl::Status status = registry->Register(entry.op_type, plan::CUDA, entry.factory);
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::cuda
