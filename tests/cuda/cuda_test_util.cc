#include "tests/cuda/cuda_test_util.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "device/cuda/cuda_devices.h"
#include "device/cuda/cuda_status.h"
#include "glog/logging.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"

namespace loom::cuda_test {
namespace {

uint16_t FloatToBfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if (std::isnan(value)) return 0x7fc0;
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

float Bfloat16ToFloat(uint16_t value) {
  uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

bool IsFloat(plan::DataType type) { return type == plan::FLOAT32 || type == plan::BFLOAT16; }

// A GPU buffer freed when it goes out of scope.
struct DeviceBuffer {
  void* data = nullptr;
  ~DeviceBuffer() { cudaFree(data); }
};

}  // namespace

std::string NoGpuReason() {
  static const std::string* reason = [] {
    absl::StatusOr<int> count = cuda::DeviceCount();
    return new std::string(count.ok() ? "" : std::string(count.status().message()));
  }();
  return *reason;
}

const KernelRegistry& Kernels() {
  static const KernelRegistry* registry = [] {
    auto* made = new KernelRegistry;
    absl::Status status = RegisterCpuKernels(made);
    if (status.ok()) status = RegisterCudaKernels(made);
    CHECK(status.ok()) << status;
    return made;
  }();
  return *registry;
}

cuda::CudaStreamContext& TestStream() {
  static cuda::CudaStreamContext* stream = cuda::CudaStreamContext::Create(0).value().release();
  return *stream;
}

HostTensor ToBfloat16(const HostTensor& float32) {
  HostTensor result{plan::BFLOAT16, float32.shape, {}};
  result.bytes.resize(static_cast<size_t>(float32.shape.NumElements()) * 2);
  absl::Span<const float> values = float32.Values<float>();
  auto* out = reinterpret_cast<uint16_t*>(result.bytes.data());
  for (size_t i = 0; i < values.size(); ++i) out[i] = FloatToBfloat16(values[i]);
  return result;
}

HostTensor ToFloat32(const HostTensor& bfloat16) {
  HostTensor result{plan::FLOAT32, bfloat16.shape, {}};
  result.bytes.resize(static_cast<size_t>(bfloat16.shape.NumElements()) * 4);
  absl::Span<const uint16_t> values = bfloat16.Values<uint16_t>();
  auto* out = reinterpret_cast<float*>(result.bytes.data());
  for (size_t i = 0; i < values.size(); ++i) out[i] = Bfloat16ToFloat(values[i]);
  return result;
}

absl::StatusOr<std::vector<HostTensor>> RunOnCuda(const kernel_test::OpCall& call,
                                                  plan::DataType data_type) {
  const bool bfloat16 = data_type == plan::BFLOAT16;
  KernelInit init = call.Init();
  init.stream = &TestStream();
  for (plan::TensorDesc& desc : init.inputs) {
    if (bfloat16 && desc.data_type() == plan::FLOAT32) desc.set_data_type(plan::BFLOAT16);
  }
  for (plan::TensorDesc& desc : init.outputs) {
    if (bfloat16 && desc.data_type() == plan::FLOAT32) desc.set_data_type(plan::BFLOAT16);
  }
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = Kernels().Create(plan::CUDA, init);
  if (!kernel.ok()) return kernel.status();

  auto& mutable_call = const_cast<kernel_test::OpCall&>(call);
  std::vector<DeviceBuffer> buffers(init.inputs.size() + init.outputs.size());
  std::vector<TensorView> inputs;
  std::vector<TensorView> outputs;
  std::vector<HostTensor> results;
  for (size_t i = 0; i < init.inputs.size(); ++i) {
    HostTensor host = mutable_call.input(static_cast<int>(i));
    if (init.inputs[i].data_type() == plan::BFLOAT16 && host.data_type == plan::FLOAT32) {
      host = ToBfloat16(host);
    }
    DeviceBuffer& buffer = buffers[i];
    size_t bytes = std::max<size_t>(host.bytes.size(), 1);
    if (absl::Status status = cuda::CudaStatus(cudaMalloc(&buffer.data, bytes), "test input");
        !status.ok()) {
      return status;
    }
    cudaMemcpy(buffer.data, host.bytes.data(), host.bytes.size(), cudaMemcpyHostToDevice);
    inputs.push_back(TensorView{buffer.data, host.data_type, host.shape});
  }
  for (size_t i = 0; i < init.outputs.size(); ++i) {
    const HostTensor& reference = mutable_call.output(static_cast<int>(i));
    HostTensor host{init.outputs[i].data_type(), reference.shape, {}};
    host.bytes.resize(
        static_cast<size_t>(reference.shape.NumElements() * DataTypeSize(host.data_type)));
    DeviceBuffer& buffer = buffers[init.inputs.size() + i];
    size_t bytes = std::max<size_t>(host.bytes.size(), 1);
    if (absl::Status status = cuda::CudaStatus(cudaMalloc(&buffer.data, bytes), "test output");
        !status.ok()) {
      return status;
    }
    // Garbage, not zeros: a kernel must write every output element.
    cudaMemset(buffer.data, 0x7f, bytes);
    outputs.push_back(TensorView{buffer.data, host.data_type, host.shape});
    results.push_back(std::move(host));
  }
  if (absl::Status status = cuda::CudaStatus(cudaDeviceSynchronize(), "preparing the test");
      !status.ok()) {
    return status;
  }
  KernelContext context{inputs, outputs, 0};
  if (absl::Status status = (*kernel)->Compute(context); !status.ok()) return status;
  if (absl::Status status = TestStream().Synchronize(); !status.ok()) return status;
  for (size_t i = 0; i < results.size(); ++i) {
    cudaMemcpy(results[i].bytes.data(), outputs[i].data, results[i].bytes.size(),
               cudaMemcpyDeviceToHost);
    if (results[i].data_type == plan::BFLOAT16) results[i] = ToFloat32(results[i]);
  }
  return results;
}

void ExpectCudaMatchesCpu(kernel_test::OpCall& call, float tolerance, plan::DataType data_type) {
  if (data_type == plan::BFLOAT16) {
    // The CPU sees exactly the values the GPU sees.
    KernelInit init = call.Init();
    for (size_t i = 0; i < init.inputs.size(); ++i) {
      HostTensor& input = call.input(static_cast<int>(i));
      if (input.data_type == plan::FLOAT32) input = ToFloat32(ToBfloat16(input));
    }
  }
  ASSERT_TRUE(call.Run().ok()) << call.Run();
  absl::StatusOr<std::vector<HostTensor>> cuda = RunOnCuda(call, data_type);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  for (size_t i = 0; i < cuda->size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    ExpectSameTensor(call.output(static_cast<int>(i)), (*cuda)[i], tolerance);
  }
}

void ExpectSameTensor(const HostTensor& expected, const HostTensor& actual, float tolerance) {
  ASSERT_EQ(expected.shape, actual.shape);
  if (!IsFloat(expected.data_type)) {
    EXPECT_EQ(expected.bytes, actual.bytes) << "integers differ";
    return;
  }
  // RunOnCuda widens bfloat16 results to float32; so is a bfloat16 reference (a cast's).
  if (expected.data_type == plan::BFLOAT16) {
    ExpectSameTensor(ToFloat32(expected), actual, tolerance);
    return;
  }
  absl::Span<const float> want = expected.Values<float>();
  absl::Span<const float> got = actual.Values<float>();
  ASSERT_EQ(want.size(), got.size());
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool same = tolerance == 0.0f
                          ? std::memcmp(&want[i], &got[i], sizeof(float)) == 0 ||
                                (std::isnan(want[i]) && std::isnan(got[i]))
                          : std::fabs(want[i] - got[i]) <= tolerance * (1.0f + std::fabs(want[i]));
    if (!same && reported++ < 5) {
      ADD_FAILURE() << "element " << i << ": cpu " << want[i] << ", cuda " << got[i];
    }
  }
}

const std::vector<int64_t>& RowLengths() {
  static const auto* lengths = new std::vector<int64_t>{1, 7, 1000, 4097};
  return *lengths;
}

std::vector<int64_t> RandomIndices(int64_t count, int64_t bound, uint32_t seed, int ignore_every,
                                   int64_t ignore) {
  const std::vector<float> uniform = kernel_test::RandomFloats(count, seed, 0.0f, 1.0f);
  std::vector<int64_t> indices(count);
  for (int64_t i = 0; i < count; ++i) {
    indices[i] = std::min<int64_t>(static_cast<int64_t>(uniform[i] * bound), bound - 1);
    if (ignore_every > 0 && i % ignore_every == ignore_every - 1) indices[i] = ignore;
  }
  return indices;
}

HostTensor IndexTensor(const Shape& shape, const std::vector<int64_t>& values,
                       plan::DataType data_type) {
  if (data_type == plan::INT64) return kernel_test::Int64Tensor(shape, values);
  return kernel_test::Int32Tensor(shape, std::vector<int32_t>(values.begin(), values.end()));
}

std::vector<absl::Status> ComputeThriceOnCuda(kernel_test::OpCall& call) {
  KernelInit init = call.Init();
  init.stream = &TestStream();
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = Kernels().Create(plan::CUDA, init);
  if (!kernel.ok()) return {kernel.status(), kernel.status()};
  std::vector<void*> buffers;
  std::vector<TensorView> inputs;
  std::vector<TensorView> outputs;
  for (size_t i = 0; i < init.inputs.size(); ++i) {
    HostTensor& host = call.input(static_cast<int>(i));
    void* buffer = nullptr;
    EXPECT_EQ(cudaMalloc(&buffer, std::max<size_t>(host.bytes.size(), 1)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(buffer, host.bytes.data(), host.bytes.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    buffers.push_back(buffer);
    inputs.push_back(TensorView{buffer, host.data_type, host.shape});
  }
  for (size_t i = 0; i < init.outputs.size(); ++i) {
    HostTensor& host = call.output(static_cast<int>(i));
    void* buffer = nullptr;
    EXPECT_EQ(cudaMalloc(&buffer, std::max<size_t>(host.bytes.size(), 1)), cudaSuccess);
    buffers.push_back(buffer);
    outputs.push_back(TensorView{buffer, host.data_type, host.shape});
  }
  KernelContext context{inputs, outputs, 0};
  std::vector<absl::Status> later;
  for (int act = 0; act < 3; ++act) {
    absl::Status status = (*kernel)->Compute(context);
    absl::Status synchronized = TestStream().Synchronize();
    EXPECT_TRUE(synchronized.ok()) << synchronized;
    if (act == 0) {
      EXPECT_TRUE(status.ok()) << "the act that finds a bad value only enqueues: " << status;
    } else {
      later.push_back(status);
    }
  }
  for (void* buffer : buffers) cudaFree(buffer);
  return later;
}

absl::Status BuildOnCuda(const kernel_test::OpCall& call, plan::DataType float_type) {
  KernelInit init = call.Init();
  init.stream = &TestStream();
  for (auto* descs : {&init.inputs, &init.outputs}) {
    for (plan::TensorDesc& desc : *descs) {
      if (desc.data_type() == plan::FLOAT32) desc.set_data_type(float_type);
    }
  }
  return Kernels().Create(plan::CUDA, init).status();
}

}  // namespace loom::cuda_test
