#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/scoped_device.h"
#include "kernels/attributes.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/gradients/broadcast_grad_kernels.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/cuda/gradient_kernels.h"
#include "kernels/kernel_table.h"

namespace loom::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;

constexpr char kReduceSumTo[] = "reduce_sum_to";
constexpr char kBroadcastTo[] = "broadcast_to";

// ---------------------------------------------------------------------------------------------
// Device side.

// `kCount` elements moved as one access (16 bytes for the vectorised path).
template <typename T, int kCount>
struct alignas(sizeof(T) * kCount) Pack {
  T values[kCount];
};

// Elements of T in one 16-byte access.
template <typename T>
constexpr int kVectorWidth = static_cast<int>(16 / sizeof(T));

__device__ __forceinline__ int64_t FirstThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// dx[i] = function(forward[i], dy[i]) for i < count: kWidth elements at a time (all three are
// aligned to a pack when kWidth > 1), then the last count % kWidth.
template <typename T, int kWidth, typename Function>
__global__ void ActivationGradElements(const T* forward, const T* dy, T* dx, int64_t count,
                                       Function function) {
  const int64_t packs = count / kWidth;
  const auto* forward_packs = reinterpret_cast<const Pack<T, kWidth>*>(forward);
  const auto* dy_packs = reinterpret_cast<const Pack<T, kWidth>*>(dy);
  auto* dx_packs = reinterpret_cast<Pack<T, kWidth>*>(dx);
  for (int64_t index = FirstThread(); index < packs; index += GridThreads()) {
    const Pack<T, kWidth> forward_pack = forward_packs[index];
    const Pack<T, kWidth> dy_pack = dy_packs[index];
    Pack<T, kWidth> result;
#pragma unroll
    for (int lane = 0; lane < kWidth; ++lane) {
      result.values[lane] =
          FromFloat<T>(function(ToFloat(forward_pack.values[lane]), ToFloat(dy_pack.values[lane])));
    }
    dx_packs[index] = result;
  }
  const int64_t tail = packs * kWidth + FirstThread();
  if (tail < count) dx[tail] = FromFloat<T>(function(ToFloat(forward[tail]), ToFloat(dy[tail])));
}

// Copies `entries` values of `table` (GPU memory) into the block's shared memory as Index.
template <typename Index>
__device__ __forceinline__ const Index* LoadTable(const int64_t* table, int entries) {
  extern __shared__ __align__(16) unsigned char shared_memory[];
  Index* shared_table = reinterpret_cast<Index*>(shared_memory);
  for (int entry = threadIdx.x; entry < entries; entry += blockDim.x) {
    shared_table[entry] = static_cast<Index>(table[entry]);
  }
  __syncthreads();
  return shared_table;
}

// The element offset of row-major index `index` over `dimensions` (outermost first) with element
// `strides` along them; 0 when rank is 0.
template <typename Index>
__device__ __forceinline__ Index OffsetOf(Index index, const Index* dimensions,
                                          const Index* strides, int rank) {
  if (rank == 0) return 0;
  Index offset = 0;
  for (int axis = rank - 1; axis > 0; --axis) {
    const Index dimension = dimensions[axis];
    const Index quotient = index / dimension;
    offset += (index - quotient * dimension) * strides[axis];
    index = quotient;
  }
  // The outermost axis needs no division: the remainder is already below its dimension.
  return offset + index * strides[0];
}

// output[i] = input[offset(i)] * scale over the `count` output elements. `table` (GPU memory)
// holds 2 * rank values: the output dimensions (outermost first) and the input's element strides
// along them (0 where broadcast), as cpu::BroadcastIteration plans them.
template <typename T, typename Index>
__global__ void BroadcastToElements(const T* input, T* output, Index count, int rank,
                                    const int64_t* table, float scale) {
  const Index* shared_table = LoadTable<Index>(table, 2 * rank);
  const Index* dimensions = shared_table;
  const Index* strides = shared_table + rank;
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index index = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; index < count;
       index += stride) {
    output[index] =
        FromFloat<T>(ToFloat(input[OffsetOf(index, dimensions, strides, rank)]) * scale);
  }
}

// The reduce_sum_to table in shared memory: the kept axes (those the output has) and the reduced
// axes (those summed over), each as dimensions then input element strides.
template <typename Index>
struct ReduceAxes {
  const Index* kept_dimensions;
  const Index* kept_strides;
  const Index* reduced_dimensions;
  const Index* reduced_strides;
  int kept_rank;
  int reduced_rank;

  __device__ __forceinline__ ReduceAxes(const int64_t* table, int kept, int reduced)
      : kept_rank(kept), reduced_rank(reduced) {
    const Index* shared_table = LoadTable<Index>(table, 2 * (kept + reduced));
    kept_dimensions = shared_table;
    kept_strides = shared_table + kept;
    reduced_dimensions = shared_table + 2 * kept;
    reduced_strides = reduced_dimensions + reduced;
  }

  __device__ __forceinline__ Index Base(Index output_index) const {
    return OffsetOf(output_index, kept_dimensions, kept_strides, kept_rank);
  }
  __device__ __forceinline__ Index Reduced(Index reduce_index) const {
    return OffsetOf(reduce_index, reduced_dimensions, reduced_strides, reduced_rank);
  }
};

// The sums of reduce_sum_to when the input's innermost axis is summed: unit u = s * outputs + o
// sums the reduction indices [s * chunk, min((s + 1) * chunk, reduce_count)) of output element o
// with a group of kGroup threads (a warp, or the whole block), each lane striding over them in
// float, then adding the lanes in a fixed tree. Writes partials[u] when `partials` is not null
// (the sum is split), otherwise output[o]. Deterministic: a unit's lanes, their elements and the
// tree do not depend on the grid.
template <typename T, typename Index, int kGroup>
__global__ void ReduceByGroups(const T* input, float* partials, T* output, Index outputs,
                               Index units, Index reduce_count, Index chunk, int kept_rank,
                               int reduced_rank, const int64_t* table) {
  static_assert(kGroup == kWarpSize || kGroup == kThreads);
  const ReduceAxes<Index> axes(table, kept_rank, reduced_rank);
  __shared__ float warp_sums[kThreads / kWarpSize];
  constexpr Index kGroupsPerBlock = kThreads / kGroup;
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const Index group = threadIdx.x / kGroup;
  // Every thread of a group takes the same units (with kGroup == kThreads, every thread of the
  // block), so the shuffles and barriers below are reached by all of them.
  for (Index unit = static_cast<Index>(blockIdx.x) * kGroupsPerBlock + group; unit < units;
       unit += static_cast<Index>(gridDim.x) * kGroupsPerBlock) {
    const Index output_index = unit % outputs;
    const Index first = (unit / outputs) * chunk;
    const Index last = min(reduce_count, first + chunk);
    const T* base = input + axes.Base(output_index);
    float sum = 0.0f;
    for (Index reduce_index = first + lane; reduce_index < last; reduce_index += kGroup) {
      sum += ToFloat(base[axes.Reduced(reduce_index)]);
    }
#pragma unroll
    for (int delta = kWarpSize / 2; delta > 0; delta /= 2) {
      sum += __shfl_down_sync(0xffffffffu, sum, delta);
    }
    if constexpr (kGroup > kWarpSize) {
      if (lane % kWarpSize == 0) warp_sums[lane / kWarpSize] = sum;
      __syncthreads();
      if (lane == 0) {
        sum = warp_sums[0];
        for (int warp = 1; warp < kGroup / kWarpSize; ++warp) sum += warp_sums[warp];
      }
      // warp_sums is written again by the next unit.
      __syncthreads();
    }
    if (lane == 0) {
      if (partials != nullptr) {
        partials[unit] = sum;
      } else {
        output[output_index] = FromFloat<T>(sum);
      }
    }
  }
}

// The sums of reduce_sum_to when the input's innermost axis is kept: one thread per unit (as in
// ReduceByGroups), adding its reduction indices one after the other in float. Neighbouring threads
// hold neighbouring output elements, so each step of the loop reads contiguous memory.
template <typename T, typename Index>
__global__ void ReduceByThreads(const T* input, float* partials, T* output, Index outputs,
                                Index units, Index reduce_count, Index chunk, int kept_rank,
                                int reduced_rank, const int64_t* table) {
  const ReduceAxes<Index> axes(table, kept_rank, reduced_rank);
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index unit = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; unit < units;
       unit += stride) {
    const Index output_index = unit % outputs;
    const Index first = (unit / outputs) * chunk;
    const Index last = min(reduce_count, first + chunk);
    const T* base = input + axes.Base(output_index);
    float sum = 0.0f;
    for (Index reduce_index = first; reduce_index < last; ++reduce_index) {
      sum += ToFloat(base[axes.Reduced(reduce_index)]);
    }
    if (partials != nullptr) {
      partials[unit] = sum;
    } else {
      output[output_index] = FromFloat<T>(sum);
    }
  }
}

// output[o] = the sum of partials[s * outputs + o] over the `splits` parts s, in order, in double.
template <typename T>
__global__ void FinishSplitSums(const float* partials, T* output, int64_t outputs, int64_t splits) {
  for (int64_t index = FirstThread(); index < outputs; index += GridThreads()) {
    double sum = 0.0;
    for (int64_t split = 0; split < splits; ++split) sum += partials[split * outputs + index];
    output[index] = FromFloat<T>(static_cast<float>(sum));
  }
}

// ---------------------------------------------------------------------------------------------
// Operations (float32 arithmetic, as the CPU kernels).

struct ReluGradFunction {
  static constexpr char kOpType[] = "relu_grad";
  static constexpr char kForwardName[] = "input 'x'";
  __device__ float operator()(float x, float dy) const { return x > 0.0f ? dy : 0.0f; }
};

// dx = dy (Phi(x) + x phi(x)).
struct GeluGradFunction {
  static constexpr char kOpType[] = "gelu_grad";
  static constexpr char kForwardName[] = "input 'x'";
  __device__ float operator()(float x, float dy) const {
    constexpr float kInverseSquareRootOfTwo = 0.70710678118654752440f;
    constexpr float kInverseSquareRootOfTwoPi = 0.39894228040143267794f;
    const float cdf = 0.5f * (1.0f + erff(x * kInverseSquareRootOfTwo));
    const float density = kInverseSquareRootOfTwoPi * expf(-0.5f * x * x);
    return dy * (cdf + x * density);
  }
};

// From the forward output y = tanh(x).
struct TanhGradFunction {
  static constexpr char kOpType[] = "tanh_grad";
  static constexpr char kForwardName[] = "input 'y'";
  __device__ float operator()(float y, float dy) const { return dy * (1.0f - y * y); }
};

// ---------------------------------------------------------------------------------------------
// Host side.

bool IsAligned(const void* pointer, size_t alignment) {
  return reinterpret_cast<uintptr_t>(pointer) % alignment == 0;
}

unsigned int Blocks(int64_t count) { return static_cast<unsigned int>(BlocksFor(count, kThreads)); }

std::string LaunchWhat(const std::string& task_name, absl::string_view op_type) {
  return absl::StrCat("task '", task_name, "': ", std::string(op_type));
}

// The data type shared by every tensor of `init`: float32 or bfloat16 (the CPU kernels' float32
// check, widened to bfloat16).
absl::StatusOr<plan::DataType> CheckAllFloat(const char* op_type, const KernelInit& init) {
  const plan::DataType data_type = init.inputs[0].data_type();
  if (data_type != plan::FLOAT32 && data_type != plan::BFLOAT16) {
    return absl::InvalidArgumentError(absl::StrCat(
        op_type, ": input 0 must be float32 or bfloat16, got ", DataTypeName(data_type)));
  }
  for (size_t index = 0; index < init.inputs.size(); ++index) {
    if (absl::Status status = cpu::CheckDataType(op_type, absl::StrCat("input ", index),
                                                 init.inputs[index], data_type);
        !status.ok())
      return status;
  }
  for (size_t index = 0; index < init.outputs.size(); ++index) {
    if (absl::Status status = cpu::CheckDataType(op_type, absl::StrCat("output ", index),
                                                 init.outputs[index], data_type);
        !status.ok())
      return status;
  }
  return data_type;
}

// GPU memory for a kernel's index table and scratch, allocated when it is built and freed with it.
class DeviceMemory {
 public:
  explicit DeviceMemory(int device) : device_(device) {}
  ~DeviceMemory() {
    if (table_ == nullptr && scratch_ == nullptr) return;
    ScopedDevice device(device_);
    if (table_ != nullptr) cudaFree(table_);
    if (scratch_ != nullptr) cudaFree(scratch_);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Copies `table` (which must stay alive until the stream has run the copy: the kernel keeps it)
  // to GPU memory on `stream`, and allocates `scratch_floats` floats of scratch (none when 0).
  absl::Status Allocate(const std::string& what, const std::vector<int64_t>& table,
                        int64_t scratch_floats, cudaStream_t stream) {
    ScopedDevice device(device_);
    if (absl::Status status =
            CudaStatus(device.error(), absl::StrCat(what, ": selecting cuda:", device_));
        !status.ok())
      return status;
    if (!table.empty()) {
      const size_t bytes = table.size() * sizeof(int64_t);
      void* allocated = nullptr;
      if (absl::Status status = CudaStatus(cudaMalloc(&allocated, bytes),
                                           absl::StrCat(what, ": allocating the index table"));
          !status.ok())
        return status;
      table_ = static_cast<int64_t*>(allocated);
      if (absl::Status status = CudaStatus(
              cudaMemcpyAsync(table_, table.data(), bytes, cudaMemcpyHostToDevice, stream),
              absl::StrCat(what, ": copying the index table"));
          !status.ok())
        return status;
    }
    if (scratch_floats > 0) {
      void* allocated = nullptr;
      if (absl::Status status = CudaStatus(
              cudaMalloc(&allocated, static_cast<size_t>(scratch_floats) * sizeof(float)),
              absl::StrCat(what, ": allocating ", scratch_floats, " partial sums"));
          !status.ok())
        return status;
      scratch_ = static_cast<float*>(allocated);
    }
    return absl::OkStatus();
  }

  const int64_t* table() const { return table_; }
  float* scratch() const { return scratch_; }

 private:
  const int device_;
  int64_t* table_ = nullptr;
  float* scratch_ = nullptr;
};

// ----- relu_grad, gelu_grad, tanh_grad.

template <typename Function>
class ActivationGradKernel final : public Kernel {
 public:
  ActivationGradKernel(const KernelInit& init, plan::DataType data_type, CudaStreamContext* stream)
      : task_name_(init.task_name), signature_(init), data_type_(data_type), stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(Function::kOpType, context); !status.ok())
      return status;
    const int64_t count = context.outputs[0].NumElements();
    if (count == 0) return absl::OkStatus();
    if (data_type_ == plan::BFLOAT16) {
      Launch<__nv_bfloat16>(context, count);
    } else {
      Launch<float>(context, count);
    }
    return LaunchStatus(LaunchWhat(task_name_, Function::kOpType));
  }

 private:
  template <typename T>
  void Launch(const KernelContext& context, int64_t count) const {
    constexpr int kWidth = kVectorWidth<T>;
    constexpr size_t kPackBytes = sizeof(T) * kWidth;
    const T* forward = context.inputs[0].Data<const T>();
    const T* dy = context.inputs[1].Data<const T>();
    T* dx = context.outputs[0].Data<T>();
    if (IsAligned(forward, kPackBytes) && IsAligned(dy, kPackBytes) && IsAligned(dx, kPackBytes)) {
      ActivationGradElements<T, kWidth>
          <<<Blocks((count + kWidth - 1) / kWidth), kThreads, 0, stream_->stream()>>>(
              forward, dy, dx, count, Function());
    } else {
      ActivationGradElements<T, 1>
          <<<Blocks(count), kThreads, 0, stream_->stream()>>>(forward, dy, dx, count, Function());
    }
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const plan::DataType data_type_;
  CudaStreamContext* const stream_;
};

template <typename Function>
absl::StatusOr<std::unique_ptr<Kernel>> CreateActivationGradKernel(const KernelInit& init) {
  constexpr const char* op_type = Function::kOpType;
  if (absl::Status status = cpu::CheckArity(op_type, init, 2, 1); !status.ok()) return status;
  absl::StatusOr<plan::DataType> data_type = CheckAllFloat(op_type, init);
  if (!data_type.ok()) return data_type.status();
  const Shape forward = Shape::FromProto(init.inputs[0]);
  if (absl::Status status = cpu::CheckSameShape(op_type, Function::kForwardName, forward,
                                                "input 'dy'", Shape::FromProto(init.inputs[1]));
      !status.ok())
    return status;
  if (absl::Status status = cpu::CheckSameShape(op_type, Function::kForwardName, forward,
                                                "output 'dx'", Shape::FromProto(init.outputs[0]));
      !status.ok())
    return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<ActivationGradKernel<Function>>(init, *data_type, *stream);
}

// ----- Shapes of broadcast_to and reduce_sum_to (the CPU kernels' checks and messages).

// One float input and one output of its type.
absl::StatusOr<plan::DataType> CheckUnaryFloat(const char* op_type, const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(op_type, init, 1, 1); !status.ok()) return status;
  return CheckAllFloat(op_type, init);
}

// ----- broadcast_to.

class BroadcastToKernel final : public Kernel {
 public:
  // `iteration` walks the output (its `b_strides` are the input's).
  BroadcastToKernel(const KernelInit& init, plan::DataType data_type, CudaStreamContext* stream,
                    const cpu::BroadcastIteration& iteration, float scale)
      : task_name_(init.task_name),
        signature_(init),
        data_type_(data_type),
        stream_(stream),
        rank_(static_cast<int>(iteration.dimensions.size())),
        scale_(scale),
        memory_(stream->device()) {
    host_table_.insert(host_table_.end(), iteration.dimensions.begin(), iteration.dimensions.end());
    host_table_.insert(host_table_.end(), iteration.b_strides.begin(), iteration.b_strides.end());
  }

  absl::Status Initialize() {
    return memory_.Allocate(LaunchWhat(task_name_, kBroadcastTo), host_table_, 0,
                            stream_->stream());
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kBroadcastTo, context); !status.ok()) return status;
    const int64_t count = context.outputs[0].NumElements();
    if (count == 0) return absl::OkStatus();
    if (data_type_ == plan::BFLOAT16) {
      Launch<__nv_bfloat16>(context, count);
    } else {
      Launch<float>(context, count);
    }
    return LaunchStatus(LaunchWhat(task_name_, kBroadcastTo));
  }

 private:
  template <typename T>
  void Launch(const KernelContext& context, int64_t count) const {
    const T* input = context.inputs[0].Data<const T>();
    T* output = context.outputs[0].Data<T>();
    if (count <= std::numeric_limits<int32_t>::max()) {
      BroadcastToElements<T, uint32_t>
          <<<Blocks(count), kThreads, 2 * rank_ * sizeof(uint32_t), stream_->stream()>>>(
              input, output, static_cast<uint32_t>(count), rank_, memory_.table(), scale_);
    } else {
      BroadcastToElements<T, int64_t>
          <<<Blocks(count), kThreads, 2 * rank_ * sizeof(int64_t), stream_->stream()>>>(
              input, output, count, rank_, memory_.table(), scale_);
    }
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const plan::DataType data_type_;
  CudaStreamContext* const stream_;
  const int rank_;
  const float scale_;
  // Output dimensions, then the input's strides along them.
  std::vector<int64_t> host_table_;
  DeviceMemory memory_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateBroadcastToKernel(const KernelInit& init) {
  absl::StatusOr<plan::DataType> data_type = CheckUnaryFloat(kBroadcastTo, init);
  if (!data_type.ok()) return data_type.status();
  absl::StatusOr<cpu::BroadcastToShape> shape = cpu::BroadcastToAlignment(init);
  if (!shape.ok()) return shape.status();
  const Shape output = Shape::FromProto(init.outputs[0]);
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  // The input laid out as `aligned` (the same bytes whether or not it keeps the axes as 1).
  const cpu::BroadcastIteration iteration =
      cpu::BroadcastIteration::Plan(output, Shape(shape->aligned), output);
  auto kernel =
      std::make_unique<BroadcastToKernel>(init, *data_type, *stream, iteration, shape->scale);
  if (absl::Status status = kernel->Initialize(); !status.ok()) return status;
  return kernel;
}

// ----- reduce_sum_to.

// Threads the split sums aim for: a few waves of an H100.
constexpr int64_t kTargetThreads = 132 * 2048;
// The most elements one lane adds in float before its sum is combined with others (so that the
// float rounding stays small), and the fewest worth splitting a sum for.
constexpr int64_t kMostPerGroupLane = 64;
constexpr int64_t kMostPerThread = 256;
constexpr int64_t kFewestPerLane = 16;

// How reduce_sum_to walks its input, planned once. The input's (merged) axes are kept (the output
// has them: output element o is the row-major index over the kept axes) or reduced (summed over:
// reduction index r is the row-major index over them). Each output element's sum is cut into
// `splits` parts of `chunk` reduction indices (the last may be shorter); with more than one part,
// the parts' float sums go to scratch and are added in double by a second kernel.
struct ReducePlan {
  // Kept dimensions, their input strides, reduced dimensions, their input strides.
  std::vector<int64_t> table;
  int kept_rank = 0;
  int reduced_rank = 0;
  int64_t outputs = 1;
  int64_t reduce_count = 1;
  // The innermost axis is reduced: groups of threads (a warp or a block) share each sum.
  bool by_groups = false;
  int group = kWarpSize;
  int64_t splits = 1;
  int64_t chunk = 1;

  static ReducePlan Make(const Shape& input, const std::vector<int64_t>& aligned) {
    const cpu::BroadcastIteration iteration =
        cpu::BroadcastIteration::Plan(input, Shape(aligned), input);
    std::vector<int64_t> kept_dimensions, kept_strides, reduced_dimensions, reduced_strides;
    for (size_t axis = 0; axis < iteration.dimensions.size(); ++axis) {
      if (iteration.b_strides[axis] == 0) {
        reduced_dimensions.push_back(iteration.dimensions[axis]);
        reduced_strides.push_back(iteration.a_strides[axis]);
      } else {
        kept_dimensions.push_back(iteration.dimensions[axis]);
        kept_strides.push_back(iteration.a_strides[axis]);
      }
    }
    ReducePlan plan;
    plan.kept_rank = static_cast<int>(kept_dimensions.size());
    plan.reduced_rank = static_cast<int>(reduced_dimensions.size());
    for (int64_t dimension : kept_dimensions) plan.outputs *= dimension;
    for (int64_t dimension : reduced_dimensions) plan.reduce_count *= dimension;
    for (const std::vector<int64_t>* part :
         {&kept_dimensions, &kept_strides, &reduced_dimensions, &reduced_strides}) {
      plan.table.insert(plan.table.end(), part->begin(), part->end());
    }
    plan.by_groups = iteration.b_strides.back() == 0;
    if (plan.outputs == 0 || plan.reduce_count == 0) return plan;
    if (plan.by_groups) plan.group = plan.reduce_count >= 2048 ? kThreads : kWarpSize;
    const int64_t lanes = plan.by_groups ? plan.group : 1;
    const int64_t most_per_lane = plan.by_groups ? kMostPerGroupLane : kMostPerThread;
    const int64_t reduce_count = plan.reduce_count;
    auto ceiling = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
    const int64_t for_accuracy = ceiling(reduce_count, lanes * most_per_lane);
    const int64_t for_parallelism = std::min(ceiling(kTargetThreads, plan.outputs * lanes),
                                             ceiling(reduce_count, lanes * kFewestPerLane));
    const int64_t splits = std::max<int64_t>({1, for_accuracy, for_parallelism});
    plan.chunk = ceiling(reduce_count, splits);
    plan.splits = ceiling(reduce_count, plan.chunk);
    return plan;
  }
};

class ReduceSumToKernel final : public Kernel {
 public:
  ReduceSumToKernel(const KernelInit& init, plan::DataType data_type, CudaStreamContext* stream,
                    ReducePlan plan)
      : task_name_(init.task_name),
        signature_(init),
        data_type_(data_type),
        stream_(stream),
        input_count_(Shape::FromProto(init.inputs[0]).NumElements()),
        plan_(std::move(plan)),
        memory_(stream->device()) {}

  absl::Status Initialize() {
    if (input_count_ == 0) return absl::OkStatus();
    return memory_.Allocate(LaunchWhat(task_name_, kReduceSumTo), plan_.table,
                            plan_.splits > 1 ? plan_.outputs * plan_.splits : 0, stream_->stream());
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kReduceSumTo, context); !status.ok()) return status;
    const TensorView& output = context.outputs[0];
    if (output.NumElements() == 0) return absl::OkStatus();
    if (input_count_ == 0) {
      // Nothing to add: every output element is an empty sum.
      return CudaStatus(cudaMemsetAsync(output.data, 0, static_cast<size_t>(output.ByteSize()),
                                        stream_->stream()),
                        LaunchWhat(task_name_, kReduceSumTo));
    }
    if (data_type_ == plan::BFLOAT16) {
      Launch<__nv_bfloat16>(context);
    } else {
      Launch<float>(context);
    }
    return LaunchStatus(LaunchWhat(task_name_, kReduceSumTo));
  }

 private:
  template <typename T>
  void Launch(const KernelContext& context) const {
    if (input_count_ <= std::numeric_limits<int32_t>::max()) {
      LaunchIndex<T, uint32_t>(context);
    } else {
      LaunchIndex<T, int64_t>(context);
    }
  }

  template <typename T, typename Index>
  void LaunchIndex(const KernelContext& context) const {
    const T* input = context.inputs[0].Data<const T>();
    T* output = context.outputs[0].Data<T>();
    const cudaStream_t stream = stream_->stream();
    const ReducePlan& plan = plan_;
    float* partials = plan.splits > 1 ? memory_.scratch() : nullptr;
    const int64_t units = plan.outputs * plan.splits;
    const size_t shared_bytes = plan.table.size() * sizeof(Index);
    if (!plan.by_groups) {
      ReduceByThreads<T, Index><<<Blocks(units), kThreads, shared_bytes, stream>>>(
          input, partials, output, static_cast<Index>(plan.outputs), static_cast<Index>(units),
          static_cast<Index>(plan.reduce_count), static_cast<Index>(plan.chunk), plan.kept_rank,
          plan.reduced_rank, memory_.table());
    } else if (plan.group == kWarpSize) {
      ReduceByGroups<T, Index, kWarpSize>
          <<<Blocks(units * kWarpSize), kThreads, shared_bytes, stream>>>(
              input, partials, output, static_cast<Index>(plan.outputs), static_cast<Index>(units),
              static_cast<Index>(plan.reduce_count), static_cast<Index>(plan.chunk), plan.kept_rank,
              plan.reduced_rank, memory_.table());
    } else {
      ReduceByGroups<T, Index, kThreads>
          <<<Blocks(units * kThreads), kThreads, shared_bytes, stream>>>(
              input, partials, output, static_cast<Index>(plan.outputs), static_cast<Index>(units),
              static_cast<Index>(plan.reduce_count), static_cast<Index>(plan.chunk), plan.kept_rank,
              plan.reduced_rank, memory_.table());
    }
    if (partials != nullptr) {
      FinishSplitSums<T><<<Blocks(plan.outputs), kThreads, 0, stream>>>(partials, output,
                                                                        plan.outputs, plan.splits);
    }
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const plan::DataType data_type_;
  CudaStreamContext* const stream_;
  const int64_t input_count_;
  const ReducePlan plan_;
  DeviceMemory memory_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateReduceSumToKernel(const KernelInit& init) {
  absl::StatusOr<plan::DataType> data_type = CheckUnaryFloat(kReduceSumTo, init);
  if (!data_type.ok()) return data_type.status();
  const Shape input = Shape::FromProto(init.inputs[0]);
  absl::StatusOr<std::vector<int64_t>> aligned = cpu::ReduceSumToAlignment(init);
  if (!aligned.ok()) return aligned.status();
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  auto kernel = std::make_unique<ReduceSumToKernel>(init, *data_type, *stream,
                                                    ReducePlan::Make(input, *aligned));
  if (absl::Status status = kernel->Initialize(); !status.ok()) return status;
  return kernel;
}

}  // namespace

absl::Status RegisterCudaGradientKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {ReluGradFunction::kOpType, CreateActivationGradKernel<ReluGradFunction>},
      {GeluGradFunction::kOpType, CreateActivationGradKernel<GeluGradFunction>},
      {TanhGradFunction::kOpType, CreateActivationGradKernel<TanhGradFunction>},
      {kBroadcastTo, CreateBroadcastToKernel},
      {kReduceSumTo, CreateReduceSumToKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
