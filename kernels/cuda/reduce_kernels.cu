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
#include "core/tensor.h"
#include "device/cuda/cuda_status.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/reduce_kernels.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/cuda/row_kernels.h"
#include "kernels/cuda/row_launch.cuh"
#include "kernels/cuda/row_reductions.cuh"
#include "kernels/kernel_table.h"

namespace loom::cuda {
namespace {

constexpr char kReduceSum[] = "reduce_sum";
constexpr char kReduceMean[] = "reduce_mean";

// ---------------------------------------------------------------------------------------------
// Device side.

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
      const int64_t column_blocks = (outputs + kRowKernelThreads - 1) / kRowKernelThreads;
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
      const dim3 grid(static_cast<unsigned int>(BlocksFor(layout_.outputs, kRowKernelThreads)),
                      static_cast<unsigned int>(chunks_));
      ReduceColumnsKernel<T><<<grid, kRowKernelThreads, shared_bytes, stream>>>(
          input, walk, table_, multiplier_, output, partials);
    }
    if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    if (partials == nullptr) return absl::OkStatus();
    ReduceChunksKernel<T>
        <<<static_cast<int>(BlocksFor(layout_.outputs, kRowKernelThreads)), kRowKernelThreads, 0,
           stream>>>(partials, chunks_, layout_.outputs, multiplier_, output);
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

absl::Status RegisterCudaReduceKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {kReduceSum, CreateReduceSumKernel},
      {kReduceMean, CreateReduceMeanKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
