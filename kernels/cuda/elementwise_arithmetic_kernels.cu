#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/scoped_device.h"
#include "kernels/attributes.h"
#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/device_values.cuh"
#include "kernels/cuda/elementwise_kernels.h"
#include "kernels/cuda/elementwise_launch.cuh"
#include "kernels/kernel_table.h"

namespace loom::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// Device side.

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
    return LaunchStatus(What(task_name_, Function::kOpType));
  }

 private:
  template <typename T>
  void Launch(const KernelContext& context, int64_t count) const {
    constexpr int kWidth = kVectorWidth<T>;
    const T* input = context.inputs[0].Data<const T>();
    T* output = context.outputs[0].Data<T>();
    if (IsAligned(input, sizeof(T) * kWidth) && IsAligned(output, sizeof(T) * kWidth)) {
      UnaryElements<T, kWidth>
          <<<ElementwiseBlocks((count + kWidth - 1) / kWidth), kElementwiseThreads, 0,
             stream_->stream()>>>(input, output, count, function_);
    } else {
      UnaryElements<T, 1><<<ElementwiseBlocks(count), kElementwiseThreads, 0, stream_->stream()>>>(
          input, output, count, function_);
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
    return LaunchStatus(What(task_name_, Operation::kOpType));
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
        BinaryElements<T, kWidth>
            <<<ElementwiseBlocks((count + kWidth - 1) / kWidth), kElementwiseThreads, 0, stream>>>(
                a, b, output, count, Operation());
      } else {
        BinaryElements<T, 1><<<ElementwiseBlocks(count), kElementwiseThreads, 0, stream>>>(
            a, b, output, count, Operation());
      }
    } else if (count <= std::numeric_limits<int32_t>::max()) {
      BroadcastElements<T, uint32_t>
          <<<ElementwiseBlocks(count), kElementwiseThreads, 3 * rank_ * sizeof(uint32_t), stream>>>(
              a, b, output, static_cast<uint32_t>(count), rank_, device_table_, Operation());
    } else {
      BroadcastElements<T, int64_t>
          <<<ElementwiseBlocks(count), kElementwiseThreads, 3 * rank_ * sizeof(int64_t), stream>>>(
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
    return LaunchStatus(What(task_name_, kBiasAdd));
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
    const unsigned int blocks = ElementwiseBlocks(count / kWidth);
    if (count <= std::numeric_limits<int32_t>::max()) {
      BiasAddElements<T, kWidth, uint32_t><<<blocks, kElementwiseThreads, 0, stream_->stream()>>>(
          x, bias, output, static_cast<uint32_t>(count), static_cast<uint32_t>(row_length_));
    } else {
      BiasAddElements<T, kWidth, int64_t><<<blocks, kElementwiseThreads, 0, stream_->stream()>>>(
          x, bias, output, count, row_length_);
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

}  // namespace

absl::Status RegisterCudaElementwiseArithmeticKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {ReluFunction::kOpType, CreateUnaryKernel<ReluFunction>},
      {GeluFunction::kOpType, CreateUnaryKernel<GeluFunction>},
      {TanhFunction::kOpType, CreateUnaryKernel<TanhFunction>},
      {ScaleFunction::kOpType, CreateScaleKernel},
      {AddOperation::kOpType, CreateBinaryKernel<AddOperation>},
      {SubtractOperation::kOpType, CreateBinaryKernel<SubtractOperation>},
      {MultiplyOperation::kOpType, CreateBinaryKernel<MultiplyOperation>},
      {DivideOperation::kOpType, CreateBinaryKernel<DivideOperation>},
      {kBiasAdd, CreateBiasAddKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
