#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "device/cuda/cuda_status.h"
#include "kernels/attributes.h"
#include "kernels/cpu/cast_kernel.h"
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

// output[i] = value for i < count (T is the element's bit pattern: uint16_t, uint32_t or
// uint64_t), packed as UnaryElements packs them (elementwise_arithmetic_kernels.cu).
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
// Host side.

// float -> bfloat16 bits, rounded to nearest even (as __float2bfloat16_rn).
uint16_t Bfloat16Bits(float value) {
  if (std::isnan(value)) return 0x7fc0;
  uint32_t bits = std::bit_cast<uint32_t>(value);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
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
                        What(task_name_, op_type_));
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
    return LaunchStatus(What(task_name_, op_type_));
  }

 private:
  template <typename T>
  void Launch(void* data, int64_t count) const {
    constexpr int kWidth = kVectorWidth<T>;
    T* output = static_cast<T*>(data);
    const T value = static_cast<T>(bits_);
    if (IsAligned(output, sizeof(T) * kWidth)) {
      FillElements<T, kWidth><<<ElementwiseBlocks((count + kWidth - 1) / kWidth),
                                kElementwiseThreads, 0, stream_->stream()>>>(output, count, value);
    } else {
      FillElements<T, 1><<<ElementwiseBlocks(count), kElementwiseThreads, 0, stream_->stream()>>>(
          output, count, value);
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

// An input of any data type and an output of the same type and shape (zeros_like, identity), and
// `extra_inputs` more inputs that only order the act (identity_after's).
absl::Status CheckSameTypeAndShape(const char* op_type, const KernelInit& init,
                                   int extra_inputs = 0) {
  if (absl::Status status = cpu::CheckArity(op_type, init, 1 + extra_inputs, 1); !status.ok()) {
    return status;
  }
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
constexpr char kIdentityAfter[] = "identity_after";
constexpr char kOffload[] = "offload";  // into a register in pinned host memory
constexpr char kReload[] = "reload";    // out of one
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
    return CudaStatus(cudaMemcpyAsync(output.data, input.data, static_cast<size_t>(bytes),
                                      cudaMemcpyDefault, stream_->stream()),
                      absl::StrCat(What(task_name_, op_type_), ": copying ", bytes, " bytes"));
  }

 private:
  const std::string task_name_;
  const char* const op_type_;
  const cpu::TensorSignature signature_;
  CudaStreamContext* const stream_;
};

// identity, offload and reload: (x) -> a copy of x (cudaMemcpyDefault: device or pinned host).
template <const char* kOpType>
absl::StatusOr<std::unique_ptr<Kernel>> CreateCopyKernel(const KernelInit& init) {
  if (absl::Status status = CheckSameTypeAndShape(kOpType, init); !status.ok()) return status;
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<CopyKernel>(init, kOpType, *stream);
}

// identity_after: (x, after, ...) -> a copy of x; the others only order the act (recomputation).
absl::StatusOr<std::unique_ptr<Kernel>> CreateIdentityAfterKernel(const KernelInit& init) {
  const int extra_inputs = std::max(1, static_cast<int>(init.inputs.size()) - 1);
  if (absl::Status status = CheckSameTypeAndShape(kIdentityAfter, init, extra_inputs);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<CopyKernel>(init, kIdentityAfter, *stream);
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
          absl::StrCat(What(task_name_, kCast), ": copying"));
    }
    if (input.data_type == plan::FLOAT32) {
      CastElements<<<ElementwiseBlocks(count), kElementwiseThreads, 0, stream_->stream()>>>(
          input.Data<const float>(), static_cast<__nv_bfloat16*>(output.data), count);
    } else {
      CastElements<<<ElementwiseBlocks(count), kElementwiseThreads, 0, stream_->stream()>>>(
          static_cast<const __nv_bfloat16*>(input.data), output.Data<float>(), count);
    }
    return LaunchStatus(What(task_name_, kCast));
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

absl::Status RegisterCudaFillAndCopyKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {kFill, CreateFillKernel},
      {kZerosLike, CreateZerosLikeKernel},
      {kOnesLike, CreateOnesLikeKernel},
      {kIdentity, CreateCopyKernel<kIdentity>},
      {kOffload, CreateCopyKernel<kOffload>},
      {kReload, CreateCopyKernel<kReload>},
      {kIdentityAfter, CreateIdentityAfterKernel},
      {kReshape, CreateReshapeKernel},
      {kCast, CreateCastKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
