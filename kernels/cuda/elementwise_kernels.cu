#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <bit>
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
#include "absl/strings/string_view.h"
#include "kernels/attributes.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/cast_kernel.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/cuda/elementwise_kernels.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/cuda/scoped_device.h"
#include "runtime/data_type.h"
#include "runtime/tensor.h"

namespace loom::cuda {
namespace {

constexpr int kThreads = 256;

// ---------------------------------------------------------------------------------------------
// Device side.
// `kCount` elements moved as one access (16 bytes for the vectorised paths).
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

// output[i] = function(input[i]) for i < count: kWidth elements at a time (input and output are
// aligned to a pack when kWidth > 1), then the last count % kWidth. `output` may be `input`.
template <typename T, int kWidth, typename Function>
__global__ void UnaryElements(const T* input, T* output, int64_t count, Function function) {
  const int64_t packs = count / kWidth;
  const auto* input_packs = reinterpret_cast<const Pack<T, kWidth>*>(input);
  auto* output_packs = reinterpret_cast<Pack<T, kWidth>*>(output);
  for (int64_t index = FirstThread(); index < packs; index += GridThreads()) {
    Pack<T, kWidth> pack = input_packs[index];
#pragma unroll
    for (int lane = 0; lane < kWidth; ++lane) {
      pack.values[lane] = FromFloat<T>(function(ToFloat(pack.values[lane])));
    }
    output_packs[index] = pack;
  }
  const int64_t tail = packs * kWidth + FirstThread();
  if (tail < count) output[tail] = FromFloat<T>(function(ToFloat(input[tail])));
}

// output[i] = operation(a[i], b[i]) for i < count, packed as in UnaryElements.
template <typename T, int kWidth, typename Operation>
__global__ void BinaryElements(const T* a, const T* b, T* output, int64_t count,
                               Operation operation) {
  const int64_t packs = count / kWidth;
  const auto* a_packs = reinterpret_cast<const Pack<T, kWidth>*>(a);
  const auto* b_packs = reinterpret_cast<const Pack<T, kWidth>*>(b);
  auto* output_packs = reinterpret_cast<Pack<T, kWidth>*>(output);
  for (int64_t index = FirstThread(); index < packs; index += GridThreads()) {
    const Pack<T, kWidth> a_pack = a_packs[index];
    const Pack<T, kWidth> b_pack = b_packs[index];
    Pack<T, kWidth> result;
#pragma unroll
    for (int lane = 0; lane < kWidth; ++lane) {
      result.values[lane] =
          FromFloat<T>(operation(ToFloat(a_pack.values[lane]), ToFloat(b_pack.values[lane])));
    }
    output_packs[index] = result;
  }
  const int64_t tail = packs * kWidth + FirstThread();
  if (tail < count) output[tail] = FromFloat<T>(operation(ToFloat(a[tail]), ToFloat(b[tail])));
}

// Broadcast binary op over `count` output elements. `table` (GPU memory) holds 3 * rank values:
// the output dimensions (outermost first), then a's and b's element strides along them (0 where
// broadcast), as cpu::BroadcastIteration plans them. Each block copies it to shared memory.
// Index is uint32_t when count <= INT32_MAX (cheaper division), int64_t otherwise.
template <typename T, typename Index, typename Operation>
__global__ void BroadcastElements(const T* a, const T* b, T* output, Index count, int rank,
                                  const int64_t* table, Operation operation) {
  extern __shared__ __align__(16) unsigned char shared_memory[];
  Index* shared_table = reinterpret_cast<Index*>(shared_memory);
  for (int entry = threadIdx.x; entry < 3 * rank; entry += blockDim.x) {
    shared_table[entry] = static_cast<Index>(table[entry]);
  }
  __syncthreads();
  const Index* dimensions = shared_table;
  const Index* a_strides = shared_table + rank;
  const Index* b_strides = shared_table + 2 * rank;
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index index = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; index < count;
       index += stride) {
    Index remainder = index;
    Index a_offset = 0;
    Index b_offset = 0;
    for (int axis = rank - 1; axis > 0; --axis) {
      const Index dimension = dimensions[axis];
      const Index quotient = remainder / dimension;
      const Index position = remainder - quotient * dimension;
      a_offset += position * a_strides[axis];
      b_offset += position * b_strides[axis];
      remainder = quotient;
    }
    // The outermost axis needs no division: the remainder is already below its dimension.
    a_offset += remainder * a_strides[0];
    b_offset += remainder * b_strides[0];
    output[index] = FromFloat<T>(operation(ToFloat(a[a_offset]), ToFloat(b[b_offset])));
  }
}

// output = x + bias along the last axis (row_length elements), kWidth elements at a time:
// row_length is a multiple of kWidth, and x, bias and output are aligned to a pack.
template <typename T, int kWidth, typename Index>
__global__ void BiasAddElements(const T* x, const T* bias, T* output, Index count,
                                Index row_length) {
  const Index packs = count / kWidth;
  const auto* x_packs = reinterpret_cast<const Pack<T, kWidth>*>(x);
  const auto* bias_packs = reinterpret_cast<const Pack<T, kWidth>*>(bias);
  auto* output_packs = reinterpret_cast<Pack<T, kWidth>*>(output);
  const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index index = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; index < packs;
       index += stride) {
    const Index column = (index * kWidth) % row_length;
    const Pack<T, kWidth> x_pack = x_packs[index];
    const Pack<T, kWidth> bias_pack = bias_packs[column / kWidth];
    Pack<T, kWidth> result;
#pragma unroll
    for (int lane = 0; lane < kWidth; ++lane) {
      result.values[lane] =
          FromFloat<T>(ToFloat(x_pack.values[lane]) + ToFloat(bias_pack.values[lane]));
    }
    output_packs[index] = result;
  }
}

// output[i] = value for i < count (T is the element's bit pattern: uint16_t, uint32_t or
// uint64_t), packed as in UnaryElements.
template <typename T, int kWidth>
__global__ void FillElements(T* output, int64_t count, T value) {
  const int64_t packs = count / kWidth;
  auto* output_packs = reinterpret_cast<Pack<T, kWidth>*>(output);
  Pack<T, kWidth> pack;
#pragma unroll
  for (int lane = 0; lane < kWidth; ++lane) pack.values[lane] = value;
  for (int64_t index = FirstThread(); index < packs; index += GridThreads()) {
    output_packs[index] = pack;
  }
  const int64_t tail = packs * kWidth + FirstThread();
  if (tail < count) output[tail] = value;
}

// ---------------------------------------------------------------------------------------------
// Operations (float32 arithmetic; bfloat16 is widened on load and rounded on store).

struct ReluFunction {
  static constexpr char kOpType[] = "relu";
  __device__ float operator()(float x) const { return x > 0.0f ? x : 0.0f; }
};

// The exact form 0.5 * x * (1 + erf(x / sqrt(2))).
struct GeluFunction {
  static constexpr char kOpType[] = "gelu";
  __device__ float operator()(float x) const {
    constexpr float kInverseSquareRootOfTwo = 0.70710678118654752440f;
    return 0.5f * x * (1.0f + erff(x * kInverseSquareRootOfTwo));
  }
};

struct TanhFunction {
  static constexpr char kOpType[] = "tanh";
  __device__ float operator()(float x) const { return tanhf(x); }
};

struct ScaleFunction {
  static constexpr char kOpType[] = "scale";
  float scale = 1.0f;
  __device__ float operator()(float x) const { return x * scale; }
};

struct AddOperation {
  static constexpr char kOpType[] = "add";
  __device__ float operator()(float a, float b) const { return a + b; }
};

struct SubtractOperation {
  static constexpr char kOpType[] = "subtract";
  __device__ float operator()(float a, float b) const { return a - b; }
};

struct MultiplyOperation {
  static constexpr char kOpType[] = "multiply";
  __device__ float operator()(float a, float b) const { return a * b; }
};

// IEEE division rounded to nearest whatever the compiler flags (as on the CPU).
struct DivideOperation {
  static constexpr char kOpType[] = "divide";
  __device__ float operator()(float a, float b) const { return __fdiv_rn(a, b); }
};

// ---------------------------------------------------------------------------------------------
// Host side.

bool IsAligned(const void* pointer, size_t alignment) {
  return reinterpret_cast<uintptr_t>(pointer) % alignment == 0;
}

unsigned int Blocks(int64_t count) { return static_cast<unsigned int>(BlocksFor(count, kThreads)); }

std::string LaunchWhat(const std::string& task_name, absl::string_view op_type) {
  return absl::StrCat("task '", task_name, "': ", op_type);
}
// The data type shared by every tensor of `init`: float32 or bfloat16 (the CPU kernels' float32
// check, widened to bfloat16).
absl::StatusOr<plan::DataType> CheckAllFloat(absl::string_view op_type, const KernelInit& init) {
  const bool has_inputs = !init.inputs.empty();
  const plan::DataType data_type =
      has_inputs ? init.inputs[0].data_type() : init.outputs[0].data_type();
  if (data_type != plan::FLOAT32 && data_type != plan::BFLOAT16) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": ", has_inputs ? "input 0" : "output 0",
                     " must be float32 or bfloat16, got ", DataTypeName(data_type)));
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

// float -> bfloat16 bits, rounded to nearest even (as __float2bfloat16_rn).
uint16_t Bfloat16Bits(float value) {
  if (std::isnan(value)) return 0x7fc0;
  uint32_t bits = std::bit_cast<uint32_t>(value);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

// ----- Unary.

template <typename Function>
class UnaryKernel final : public Kernel {
 public:
  UnaryKernel(const KernelInit& init, plan::DataType data_type, CudaStreamContext* stream,
              Function function)
      : task_name_(init.task_name),
        signature_(init),
        data_type_(data_type),
        stream_(stream),
        function_(function) {}

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
    const T* input = context.inputs[0].Data<const T>();
    T* output = context.outputs[0].Data<T>();
    if (IsAligned(input, sizeof(T) * kWidth) && IsAligned(output, sizeof(T) * kWidth)) {
      UnaryElements<T, kWidth>
          <<<Blocks((count + kWidth - 1) / kWidth), kThreads, 0, stream_->stream()>>>(
              input, output, count, function_);
    } else {
      UnaryElements<T, 1>
          <<<Blocks(count), kThreads, 0, stream_->stream()>>>(input, output, count, function_);
    }
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const plan::DataType data_type_;
  CudaStreamContext* const stream_;
  const Function function_;
};

// One float input and one output of its type and shape.
absl::StatusOr<plan::DataType> CheckUnary(const char* op_type, const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(op_type, init, 1, 1); !status.ok()) return status;
  absl::StatusOr<plan::DataType> data_type = CheckAllFloat(op_type, init);
  if (!data_type.ok()) return data_type.status();
  if (absl::Status status = cpu::CheckSameShape(op_type, "input", Shape::FromProto(init.inputs[0]),
                                                "output", Shape::FromProto(init.outputs[0]));
      !status.ok())
    return status;
  return *data_type;
}

template <typename Function>
absl::StatusOr<std::unique_ptr<Kernel>> MakeUnaryKernel(const KernelInit& init,
                                                        plan::DataType data_type,
                                                        Function function) {
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<UnaryKernel<Function>>(init, data_type, *stream, function);
}

template <typename Function>
absl::StatusOr<std::unique_ptr<Kernel>> CreateUnaryKernel(const KernelInit& init) {
  absl::StatusOr<plan::DataType> data_type = CheckUnary(Function::kOpType, init);
  if (!data_type.ok()) return data_type.status();
  return MakeUnaryKernel(init, *data_type, Function());
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateScaleKernel(const KernelInit& init) {
  absl::StatusOr<plan::DataType> data_type = CheckUnary(ScaleFunction::kOpType, init);
  if (!data_type.ok()) return data_type.status();
  absl::StatusOr<double> scale = Attributes(*init.conf).GetFloat("scale");
  if (!scale.ok()) return cpu::WithOpType(ScaleFunction::kOpType, scale.status());
  if (!std::isfinite(*scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale: attribute 'scale' must be finite, got ", *scale));
  }
  return MakeUnaryKernel(init, *data_type, ScaleFunction{static_cast<float>(*scale)});
}

// ----- Binary.

template <typename Operation>
class BinaryKernel final : public Kernel {
 public:
  // `contiguous`: a, b and the output are read in the same order (no broadcasting, or only
  // axes of size 1 added); otherwise `iteration` is the walk, uploaded by UploadTable.
  BinaryKernel(const KernelInit& init, plan::DataType data_type, CudaStreamContext* stream,
               const cpu::BroadcastIteration& iteration, bool contiguous)
      : task_name_(init.task_name),
        signature_(init),
        data_type_(data_type),
        stream_(stream),
        contiguous_(contiguous),
        rank_(static_cast<int>(iteration.dimensions.size())) {
    if (!contiguous_) {
      host_table_.insert(host_table_.end(), iteration.dimensions.begin(),
                         iteration.dimensions.end());
      host_table_.insert(host_table_.end(), iteration.a_strides.begin(), iteration.a_strides.end());
      host_table_.insert(host_table_.end(), iteration.b_strides.begin(), iteration.b_strides.end());
    }
  }

  ~BinaryKernel() override {
    if (device_table_ != nullptr) {
      ScopedDevice device(stream_->device());
      cudaFree(device_table_);
    }
  }

  BinaryKernel(const BinaryKernel&) = delete;
  BinaryKernel& operator=(const BinaryKernel&) = delete;

  // Copies the broadcast table to GPU memory, once, on the kernel's stream (so that every act
  // enqueued later sees it). The host copy stays alive with the kernel.
  absl::Status UploadTable() {
    if (contiguous_) return absl::OkStatus();
    const std::string what = absl::StrCat("task '", task_name_, "': ", Operation::kOpType);
    ScopedDevice device(stream_->device());
    if (absl::Status status =
            CudaStatus(device.error(), absl::StrCat(what, ": selecting cuda:", stream_->device()));
        !status.ok())
      return status;
    const size_t bytes = host_table_.size() * sizeof(int64_t);
    if (absl::Status status = CudaStatus(cudaMalloc(&device_table_, bytes),
                                         absl::StrCat(what, ": allocating the broadcast table"));
        !status.ok()) {
      device_table_ = nullptr;
      return status;
    }
    return CudaStatus(cudaMemcpyAsync(device_table_, host_table_.data(), bytes,
                                      cudaMemcpyHostToDevice, stream_->stream()),
                      absl::StrCat(what, ": copying the broadcast table"));
  }

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(Operation::kOpType, context); !status.ok())
      return status;
    const int64_t count = context.outputs[0].NumElements();
    if (count == 0) return absl::OkStatus();
    if (data_type_ == plan::BFLOAT16) {
      Launch<__nv_bfloat16>(context, count);
    } else {
      Launch<float>(context, count);
    }
    return LaunchStatus(LaunchWhat(task_name_, Operation::kOpType));
  }

 private:
  template <typename T>
  void Launch(const KernelContext& context, int64_t count) const {
    const T* a = context.inputs[0].Data<const T>();
    const T* b = context.inputs[1].Data<const T>();
    T* output = context.outputs[0].Data<T>();
    const cudaStream_t stream = stream_->stream();
    if (contiguous_) {
      constexpr int kWidth = kVectorWidth<T>;
      constexpr size_t kPackBytes = sizeof(T) * kWidth;
      if (IsAligned(a, kPackBytes) && IsAligned(b, kPackBytes) && IsAligned(output, kPackBytes)) {
        BinaryElements<T, kWidth><<<Blocks((count + kWidth - 1) / kWidth), kThreads, 0, stream>>>(
            a, b, output, count, Operation());
      } else {
        BinaryElements<T, 1>
            <<<Blocks(count), kThreads, 0, stream>>>(a, b, output, count, Operation());
      }
    } else if (count <= std::numeric_limits<int32_t>::max()) {
      BroadcastElements<T, uint32_t>
          <<<Blocks(count), kThreads, 3 * rank_ * sizeof(uint32_t), stream>>>(
              a, b, output, static_cast<uint32_t>(count), rank_, device_table_, Operation());
    } else {
      BroadcastElements<T, int64_t>
          <<<Blocks(count), kThreads, 3 * rank_ * sizeof(int64_t), stream>>>(
              a, b, output, count, rank_, device_table_, Operation());
    }
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const plan::DataType data_type_;
  CudaStreamContext* const stream_;
  const bool contiguous_;
  const int rank_;
  // Dimensions, a's strides, b's strides (rank_ each); empty when contiguous_.
  std::vector<int64_t> host_table_;
  int64_t* device_table_ = nullptr;
};

template <typename Operation>
absl::StatusOr<std::unique_ptr<Kernel>> CreateBinaryKernel(const KernelInit& init) {
  constexpr const char* op_type = Operation::kOpType;
  if (absl::Status status = cpu::CheckArity(op_type, init, 2, 1); !status.ok()) return status;
  absl::StatusOr<plan::DataType> data_type = CheckAllFloat(op_type, init);
  if (!data_type.ok()) return data_type.status();
  const Shape a = Shape::FromProto(init.inputs[0]);
  const Shape b = Shape::FromProto(init.inputs[1]);
  const Shape output = Shape::FromProto(init.outputs[0]);
  absl::StatusOr<Shape> broadcast = cpu::BroadcastShapes(a, b);
  if (!broadcast.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(op_type, ": ", broadcast.status().message()));
  }
  if (output != *broadcast) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": output has shape ", output.ToString(), " but ", a.ToString(),
                     " and ", b.ToString(), " broadcast to ", broadcast->ToString()));
  }
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  const cpu::BroadcastIteration iteration = cpu::BroadcastIteration::Plan(a, b, output);
  // Same shapes, or shapes that differ only by axes of size 1: one walk for all three.
  const bool contiguous = a == b || (iteration.dimensions.size() == 1 &&
                                     iteration.a_strides[0] == 1 && iteration.b_strides[0] == 1);
  auto kernel =
      std::make_unique<BinaryKernel<Operation>>(init, *data_type, *stream, iteration, contiguous);
  if (absl::Status status = kernel->UploadTable(); !status.ok()) return status;
  return kernel;
}

// ----- bias_add.

constexpr char kBiasAdd[] = "bias_add";

class BiasAddKernel final : public Kernel {
 public:
  BiasAddKernel(const KernelInit& init, plan::DataType data_type, CudaStreamContext* stream,
                int64_t row_length)
      : task_name_(init.task_name),
        signature_(init),
        data_type_(data_type),
        stream_(stream),
        row_length_(row_length) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kBiasAdd, context); !status.ok()) return status;
    const int64_t count = context.inputs[0].NumElements();
    if (row_length_ == 0 || count == 0) return absl::OkStatus();
    if (data_type_ == plan::BFLOAT16) {
      Launch<__nv_bfloat16>(context, count);
    } else {
      Launch<float>(context, count);
    }
    return LaunchStatus(LaunchWhat(task_name_, kBiasAdd));
  }

 private:
  template <typename T>
  void Launch(const KernelContext& context, int64_t count) const {
    const T* x = context.inputs[0].Data<const T>();
    const T* bias = context.inputs[1].Data<const T>();
    T* output = context.outputs[0].Data<T>();
    constexpr int kWidth = kVectorWidth<T>;
    constexpr size_t kPackBytes = sizeof(T) * kWidth;
    if (row_length_ % kWidth == 0 && IsAligned(x, kPackBytes) && IsAligned(bias, kPackBytes) &&
        IsAligned(output, kPackBytes)) {
      LaunchWidth<T, kWidth>(x, bias, output, count);
    } else {
      LaunchWidth<T, 1>(x, bias, output, count);
    }
  }

  template <typename T, int kWidth>
  void LaunchWidth(const T* x, const T* bias, T* output, int64_t count) const {
    const unsigned int blocks = Blocks(count / kWidth);
    if (count <= std::numeric_limits<int32_t>::max()) {
      BiasAddElements<T, kWidth, uint32_t><<<blocks, kThreads, 0, stream_->stream()>>>(
          x, bias, output, static_cast<uint32_t>(count), static_cast<uint32_t>(row_length_));
    } else {
      BiasAddElements<T, kWidth, int64_t>
          <<<blocks, kThreads, 0, stream_->stream()>>>(x, bias, output, count, row_length_);
    }
  }

  const std::string task_name_;
  const cpu::TensorSignature signature_;
  const plan::DataType data_type_;
  CudaStreamContext* const stream_;
  const int64_t row_length_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateBiasAddKernel(const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(kBiasAdd, init, 2, 1); !status.ok()) return status;
  absl::StatusOr<plan::DataType> data_type = CheckAllFloat(kBiasAdd, init);
  if (!data_type.ok()) return data_type.status();
  const Shape x = Shape::FromProto(init.inputs[0]);
  const Shape bias = Shape::FromProto(init.inputs[1]);
  if (x.rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kBiasAdd, ": x must have rank >= 1, got a scalar"));
  }
  const int64_t row_length = x.dimension(x.rank() - 1);
  if (bias != Shape({row_length})) {
    return absl::InvalidArgumentError(absl::StrCat(kBiasAdd, ": bias must have shape [", row_length,
                                                   "] to match the last axis of x ", x.ToString(),
                                                   ", got ", bias.ToString()));
  }
  if (absl::Status status =
          cpu::CheckSameShape(kBiasAdd, "x", x, "output", Shape::FromProto(init.outputs[0]));
      !status.ok())
    return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<BiasAddKernel>(init, *data_type, *stream, row_length);
}

// ----- fill, ones_like, zeros_like.

// Writes one bit pattern of 2, 4 or 8 bytes into every element of the output (zeros with
// cudaMemsetAsync).
class FillKernel final : public Kernel {
 public:
  FillKernel(const KernelInit& init, const char* op_type, CudaStreamContext* stream,
             int64_t element_size, uint64_t bits)
      : task_name_(init.task_name),
        op_type_(op_type),
        signature_(init),
        stream_(stream),
        element_size_(element_size),
        bits_(bits) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(op_type_, context); !status.ok()) return status;
    const TensorView& output = context.outputs[0];
    const int64_t count = output.NumElements();
    if (count == 0) return absl::OkStatus();
    if (bits_ == 0) {
      return CudaStatus(cudaMemsetAsync(output.data, 0, static_cast<size_t>(output.ByteSize()),
                                        stream_->stream()),
                        LaunchWhat(task_name_, op_type_));
    }
    switch (element_size_) {
      case 2:
        Launch<uint16_t>(output.data, count);
        break;
      case 4:
        Launch<uint32_t>(output.data, count);
        break;
      default:
        Launch<uint64_t>(output.data, count);
        break;
    }
    return LaunchStatus(LaunchWhat(task_name_, op_type_));
  }

 private:
  template <typename T>
  void Launch(void* data, int64_t count) const {
    constexpr int kWidth = kVectorWidth<T>;
    T* output = static_cast<T*>(data);
    const T value = static_cast<T>(bits_);
    if (IsAligned(output, sizeof(T) * kWidth)) {
      FillElements<T, kWidth>
          <<<Blocks((count + kWidth - 1) / kWidth), kThreads, 0, stream_->stream()>>>(output, count,
                                                                                      value);
    } else {
      FillElements<T, 1><<<Blocks(count), kThreads, 0, stream_->stream()>>>(output, count, value);
    }
  }

  const std::string task_name_;
  const char* const op_type_;
  const cpu::TensorSignature signature_;
  CudaStreamContext* const stream_;
  const int64_t element_size_;
  const uint64_t bits_;
};

constexpr char kFill[] = "fill";
constexpr char kOnesLike[] = "ones_like";
constexpr char kZerosLike[] = "zeros_like";

// The bits of `value` as an element of a float32 or bfloat16 tensor.
uint64_t FloatBits(float value, plan::DataType data_type) {
  return data_type == plan::BFLOAT16 ? Bfloat16Bits(value) : std::bit_cast<uint32_t>(value);
}

// The attribute "value" as an integer of type T, exactly (the CPU fill kernel's rules).
template <typename T>
absl::StatusOr<T> IntegerValue(const plan::KernelConf& conf, plan::DataType data_type) {
  Attributes attributes(conf);
  int64_t value = 0;
  auto iterator = conf.attributes().find("value");
  if (iterator != conf.attributes().end() && iterator->second.has_int_value()) {
    value = iterator->second.int_value();
  } else {
    absl::StatusOr<double> number = attributes.GetFloat("value", 0.0);
    if (!number.ok()) return cpu::WithOpType(kFill, number.status());
    // 2^63 is exactly representable; anything at or above it (or NaN) does not fit in int64.
    if (!(std::trunc(*number) == *number && *number >= -9223372036854775808.0 &&
          *number < 9223372036854775808.0)) {
      return absl::InvalidArgumentError(absl::StrCat(kFill, ": value ", *number,
                                                     " is not a whole number that fits in ",
                                                     DataTypeName(data_type)));
    }
    value = static_cast<int64_t>(*number);
  }
  if (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFill, ": value ", value, " does not fit in ", DataTypeName(data_type)));
  }
  return static_cast<T>(value);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateFillKernel(const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(kFill, init, 0, 1); !status.ok()) return status;
  const plan::DataType data_type = init.outputs[0].data_type();
  uint64_t bits = 0;
  switch (data_type) {
    case plan::FLOAT32:
    case plan::BFLOAT16: {
      absl::StatusOr<double> value = Attributes(*init.conf).GetFloat("value", 0.0);
      if (!value.ok()) return cpu::WithOpType(kFill, value.status());
      bits = FloatBits(static_cast<float>(*value), data_type);
      break;
    }
    case plan::INT32: {
      absl::StatusOr<int32_t> value = IntegerValue<int32_t>(*init.conf, data_type);
      if (!value.ok()) return value.status();
      bits = static_cast<uint32_t>(*value);
      break;
    }
    case plan::INT64: {
      absl::StatusOr<int64_t> value = IntegerValue<int64_t>(*init.conf, data_type);
      if (!value.ok()) return value.status();
      bits = static_cast<uint64_t>(*value);
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(kFill, ": output must be float32, bfloat16, int32 or int64, got ",
                       DataTypeName(data_type)));
  }
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<FillKernel>(init, kFill, *stream, DataTypeSize(data_type), bits);
}

// The input of a *_like op or a copy: any data type with a size.
absl::Status CheckInputHasType(const char* op_type, const KernelInit& init) {
  const plan::DataType data_type = init.inputs[0].data_type();
  if (DataTypeSize(data_type) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": input has no data type (", DataTypeName(data_type), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateOnesLikeKernel(const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(kOnesLike, init, 1, 1); !status.ok()) return status;
  if (absl::Status status = CheckInputHasType(kOnesLike, init); !status.ok()) return status;
  const plan::DataType data_type = init.outputs[0].data_type();
  if (data_type != plan::FLOAT32 && data_type != plan::BFLOAT16) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOnesLike, ": output must be float32 or bfloat16, got ", DataTypeName(data_type)));
  }
  if (absl::Status status =
          cpu::CheckSameShape(kOnesLike, "input", Shape::FromProto(init.inputs[0]), "output",
                              Shape::FromProto(init.outputs[0]));
      !status.ok())
    return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<FillKernel>(init, kOnesLike, *stream, DataTypeSize(data_type),
                                      FloatBits(1.0f, data_type));
}

// An input of any data type and an output of the same type and shape (zeros_like, identity).
absl::Status CheckSameTypeAndShape(const char* op_type, const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(op_type, init, 1, 1); !status.ok()) return status;
  if (absl::Status status = CheckInputHasType(op_type, init); !status.ok()) return status;
  if (absl::Status status =
          cpu::CheckDataType(op_type, "output", init.outputs[0], init.inputs[0].data_type());
      !status.ok())
    return status;
  return cpu::CheckSameShape(op_type, "input", Shape::FromProto(init.inputs[0]), "output",
                             Shape::FromProto(init.outputs[0]));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateZerosLikeKernel(const KernelInit& init) {
  if (absl::Status status = CheckSameTypeAndShape(kZerosLike, init); !status.ok()) return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<FillKernel>(init, kZerosLike, *stream,
                                      DataTypeSize(init.outputs[0].data_type()), 0);
}

// ----- identity, reshape.

constexpr char kIdentity[] = "identity";
constexpr char kReshape[] = "reshape";

// Copies the input's bytes into the output on the stream (nothing when they are the same buffer).
class CopyKernel final : public Kernel {
 public:
  CopyKernel(const KernelInit& init, const char* op_type, CudaStreamContext* stream)
      : task_name_(init.task_name), op_type_(op_type), signature_(init), stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(op_type_, context); !status.ok()) return status;
    const TensorView& input = context.inputs[0];
    const TensorView& output = context.outputs[0];
    const int64_t bytes = input.ByteSize();
    if (input.data == output.data || bytes <= 0) return absl::OkStatus();
    return CudaStatus(
        cudaMemcpyAsync(output.data, input.data, static_cast<size_t>(bytes), cudaMemcpyDefault,
                        stream_->stream()),
        absl::StrCat(LaunchWhat(task_name_, op_type_), ": copying ", bytes, " bytes"));
  }

 private:
  const std::string task_name_;
  const char* const op_type_;
  const cpu::TensorSignature signature_;
  CudaStreamContext* const stream_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateIdentityKernel(const KernelInit& init) {
  if (absl::Status status = CheckSameTypeAndShape(kIdentity, init); !status.ok()) return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<CopyKernel>(init, kIdentity, *stream);
}

// ----- cast: float32 <-> bfloat16 (a copy between equal types).

constexpr char kCast[] = "cast";

template <typename From, typename To>
__global__ void CastElements(const From* input, To* output, int64_t count) {
  for (int64_t index = FirstThread(); index < count; index += GridThreads()) {
    output[index] = FromFloat<To>(ToFloat(input[index]));
  }
}

class CastKernel final : public Kernel {
 public:
  CastKernel(const KernelInit& init, CudaStreamContext* stream)
      : task_name_(init.task_name), signature_(init), stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(kCast, context); !status.ok()) return status;
    const TensorView& input = context.inputs[0];
    const TensorView& output = context.outputs[0];
    const int64_t count = input.NumElements();
    if (count == 0) return absl::OkStatus();
    if (input.data_type == output.data_type) {
      if (input.data == output.data) return absl::OkStatus();
      return CudaStatus(
          cudaMemcpyAsync(output.data, input.data, static_cast<size_t>(input.ByteSize()),
                          cudaMemcpyDefault, stream_->stream()),
          absl::StrCat(LaunchWhat(task_name_, kCast), ": copying"));
    }
    if (input.data_type == plan::FLOAT32) {
      CastElements<<<Blocks(count), kThreads, 0, stream_->stream()>>>(
          input.Data<const float>(), static_cast<__nv_bfloat16*>(output.data), count);
    } else {
      CastElements<<<Blocks(count), kThreads, 0, stream_->stream()>>>(
          static_cast<const __nv_bfloat16*>(input.data), output.Data<float>(), count);
    }
    return LaunchStatus(LaunchWhat(task_name_, kCast));
  }

 private:
  const std::string task_name_;
  const cpu::TensorSignature signature_;
  CudaStreamContext* const stream_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateCastKernel(const KernelInit& init) {
  if (absl::Status status = cpu::CheckCast(init); !status.ok()) return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<CastKernel>(init, *stream);
}

// The CPU reshape's check: one data type of 1, 2, 4 or 8 bytes for the input and output.
absl::Status CheckCommonDataType(const char* op_type, const KernelInit& init) {
  const plan::DataType data_type = init.inputs[0].data_type();
  const int64_t size = DataTypeSize(data_type);
  if (size != 1 && size != 2 && size != 4 && size != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": input has no data type (", DataTypeName(data_type), ")"));
  }
  for (size_t index = 1; index < init.inputs.size(); ++index) {
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
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateReshapeKernel(const KernelInit& init) {
  if (absl::Status status = cpu::CheckArity(kReshape, init, 1, 1); !status.ok()) return status;
  if (absl::Status status = CheckCommonDataType(kReshape, init); !status.ok()) return status;
  const Shape input = Shape::FromProto(init.inputs[0]);
  const Shape output = Shape::FromProto(init.outputs[0]);
  if (input.NumElements() != output.NumElements()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kReshape, ": output ", output.ToString(), " has ", output.NumElements(),
                     " elements but input ", input.ToString(), " has ", input.NumElements()));
  }
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<CopyKernel>(init, kReshape, *stream);
}

}  // namespace

absl::Status RegisterCudaElementwiseKernels(KernelRegistry* registry) {
  struct Entry {
    const char* op_type;
    absl::StatusOr<std::unique_ptr<Kernel>> (*factory)(const KernelInit&);
  };
  static constexpr Entry kEntries[] = {
      {ReluFunction::kOpType, CreateUnaryKernel<ReluFunction>},
      {GeluFunction::kOpType, CreateUnaryKernel<GeluFunction>},
      {TanhFunction::kOpType, CreateUnaryKernel<TanhFunction>},
      {ScaleFunction::kOpType, CreateScaleKernel},
      {AddOperation::kOpType, CreateBinaryKernel<AddOperation>},
      {SubtractOperation::kOpType, CreateBinaryKernel<SubtractOperation>},
      {MultiplyOperation::kOpType, CreateBinaryKernel<MultiplyOperation>},
      {DivideOperation::kOpType, CreateBinaryKernel<DivideOperation>},
      {kBiasAdd, CreateBiasAddKernel},
      {kFill, CreateFillKernel},
      {kZerosLike, CreateZerosLikeKernel},
      {kOnesLike, CreateOnesLikeKernel},
      {kIdentity, CreateIdentityKernel},
      {kReshape, CreateReshapeKernel},
      {kCast, CreateCastKernel},
  };
  for (const Entry& entry : kEntries) {
    if (absl::Status status = registry->Register(entry.op_type, plan::CUDA, entry.factory);
        !status.ok())
      return status;
  }
  return absl::OkStatus();
}

}  // namespace loom::cuda
