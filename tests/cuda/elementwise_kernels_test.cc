#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/kernel.h"
#include "proto/plan.pb.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

using kernel_test::FloatAttribute;
using kernel_test::FloatTensor;
using kernel_test::Int32Tensor;
using kernel_test::Int64Tensor;
using kernel_test::IntAttribute;
using kernel_test::OpCall;
using kernel_test::RandomFloats;
using ::testing::HasSubstr;

constexpr float kFloat32Tolerance = 1e-6f;
constexpr float kBfloat16Tolerance = 1e-2f;

// Runs `call` as float32 and again (a fresh call from `make_call`) as bfloat16.
template <typename MakeCall>
void ExpectBothTypesMatch(const MakeCall& make_call) {
  {
    SCOPED_TRACE("float32");
    std::unique_ptr<OpCall> call = make_call();
    cuda_test::ExpectCudaMatchesCpu(*call, kFloat32Tolerance);
  }
  {
    SCOPED_TRACE("bfloat16");
    std::unique_ptr<OpCall> call = make_call();
    cuda_test::ExpectCudaMatchesCpu(*call, kBfloat16Tolerance, plan::BFLOAT16);
  }
}

// ----- Unary.

const std::vector<Shape>& UnaryShapes() {
  static const auto* shapes = new std::vector<Shape>{
      Shape{}, Shape{1}, Shape{7}, Shape{3, 5}, Shape{4, 8, 32}, Shape{1000003}, Shape{2, 0},
  };
  return *shapes;
}

void ExpectUnaryMatches(
    const std::string& op_type, float low, float high,
    const std::vector<std::pair<std::string, plan::AttributeValue>>& attributes = {}) {
  for (const Shape& shape : UnaryShapes()) {
    SCOPED_TRACE(op_type + " " + shape.ToString());
    ExpectBothTypesMatch([&] {
      auto call = std::make_unique<OpCall>(op_type);
      for (const auto& [name, value] : attributes) call->Attribute(name, value);
      call->Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 11, low, high)))
          .Output(shape);
      return call;
    });
  }
}

TEST(CudaElementwiseTest, ReluMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectUnaryMatches("relu", -1.0f, 1.0f);
}

TEST(CudaElementwiseTest, GeluMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectUnaryMatches("gelu", -3.0f, 3.0f);
}

TEST(CudaElementwiseTest, TanhMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectUnaryMatches("tanh", -3.0f, 3.0f);
}

TEST(CudaElementwiseTest, ScaleMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectUnaryMatches("scale", -2.0f, 2.0f, {{"scale", FloatAttribute(-0.375)}});
  ExpectUnaryMatches("scale", -2.0f, 2.0f, {{"scale", IntAttribute(3)}});
}

// ----- Binary.

struct BroadcastCase {
  Shape a;
  Shape b;
  Shape output;
};

const std::vector<BroadcastCase>& BroadcastCases() {
  static const auto* cases = new std::vector<BroadcastCase>{
      // Same shapes (the packed path), with a size that is no multiple of the block or pack.
      {Shape{1000003}, Shape{1000003}, Shape{1000003}},
      {Shape{3, 5}, Shape{3, 5}, Shape{3, 5}},
      {Shape{}, Shape{}, Shape{}},
      // Only axes of size 1 differ: still one contiguous walk.
      {Shape{1, 5}, Shape{5}, Shape{1, 5}},
      // Broadcasting.
      {Shape{4, 1, 5}, Shape{3, 1}, Shape{4, 3, 5}},
      {Shape{3, 1}, Shape{4, 1, 5}, Shape{4, 3, 5}},
      {Shape{2, 3, 4}, Shape{4}, Shape{2, 3, 4}},
      {Shape{4}, Shape{2, 3, 4}, Shape{2, 3, 4}},
      {Shape{2, 3, 4}, Shape{3, 1}, Shape{2, 3, 4}},
      {Shape{}, Shape{3, 4}, Shape{3, 4}},
      {Shape{3, 4}, Shape{}, Shape{3, 4}},
      {Shape{1}, Shape{7}, Shape{7}},
      {Shape{3, 1}, Shape{1, 5}, Shape{3, 5}},
      {Shape{2, 1, 3, 1, 2}, Shape{2, 4, 1, 5, 1}, Shape{2, 4, 3, 5, 2}},
      // Ten alternating axes: a long table.
      {Shape{2, 1, 2, 1, 2, 1, 2, 1, 2, 1}, Shape{1, 3, 1, 3, 1, 3, 1, 3, 1, 3},
       Shape{2, 3, 2, 3, 2, 3, 2, 3, 2, 3}},
      // Large outer product, no multiple of the block size.
      {Shape{1001, 1}, Shape{1, 1003}, Shape{1001, 1003}},
      // Nothing to compute.
      {Shape{0, 3}, Shape{3}, Shape{0, 3}},
  };
  return *cases;
}

void ExpectBinaryMatches(const std::string& op_type) {
  for (const BroadcastCase& shapes : BroadcastCases()) {
    SCOPED_TRACE(op_type + " " + shapes.a.ToString() + " with " + shapes.b.ToString());
    ExpectBothTypesMatch([&] {
      auto call = std::make_unique<OpCall>(op_type);
      // b away from zero so that divide stays well conditioned.
      call->Input(FloatTensor(shapes.a, RandomFloats(shapes.a.NumElements(), 21, -2.0f, 2.0f)))
          .Input(FloatTensor(shapes.b, RandomFloats(shapes.b.NumElements(), 22, 0.5f, 2.0f)))
          .Output(shapes.output);
      return call;
    });
  }
}

TEST(CudaElementwiseTest, AddMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectBinaryMatches("add");
}

TEST(CudaElementwiseTest, SubtractMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectBinaryMatches("subtract");
}

TEST(CudaElementwiseTest, MultiplyMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectBinaryMatches("multiply");
}

TEST(CudaElementwiseTest, DivideMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectBinaryMatches("divide");
}

TEST(CudaElementwiseTest, DivideByZeroFollowsIeee) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("divide");
  call.Input(FloatTensor(Shape{3}, {1.0f, -1.0f, 0.0f}))
      .Input(FloatTensor(Shape{1}, {0.0f}))
      .Output(Shape{3});
  absl::StatusOr<std::vector<HostTensor>> outputs = cuda_test::RunOnCuda(call);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const std::vector<float> values = kernel_test::FloatValues((*outputs)[0]);
  EXPECT_EQ(values[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(values[1], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(values[2]));
}

// ----- bias_add.

TEST(CudaElementwiseTest, BiasAddMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  const std::vector<Shape> shapes = {
      Shape{6},       Shape{4, 6},       Shape{3, 5, 7}, Shape{2, 8, 1024}, Shape{977, 1024},
      Shape{1000003}, Shape{1, 1000003}, Shape{0, 4},    Shape{3, 0},
  };
  for (const Shape& x : shapes) {
    SCOPED_TRACE("bias_add " + x.ToString());
    const Shape bias{x.dimension(x.rank() - 1)};
    ExpectBothTypesMatch([&] {
      auto call = std::make_unique<OpCall>("bias_add");
      call->Input(FloatTensor(x, RandomFloats(x.NumElements(), 41)))
          .Input(FloatTensor(bias, RandomFloats(bias.NumElements(), 42)))
          .Output(x);
      return call;
    });
  }
}

// ----- fill, zeros_like, ones_like.

TEST(CudaElementwiseTest, FillMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const Shape& shape : {Shape{}, Shape{7}, Shape{1000003}, Shape{0}}) {
    SCOPED_TRACE("fill " + shape.ToString());
    ExpectBothTypesMatch([&] {
      auto call = std::make_unique<OpCall>("fill");
      call->Attribute("value", FloatAttribute(-2.5)).Output(shape);
      return call;
    });
    ExpectBothTypesMatch([&] {
      auto call = std::make_unique<OpCall>("fill");  // The default value, 0.
      call->Output(shape);
      return call;
    });
  }
}

TEST(CudaElementwiseTest, FillWritesIntegers) {
  LOOM_SKIP_WITHOUT_GPU();
  {
    OpCall call("fill");
    call.Attribute("value", IntAttribute(-7)).Output(Shape{1001}, plan::INT32);
    cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
  }
  {
    OpCall call("fill");
    call.Attribute("value", IntAttribute(int64_t{1} << 40)).Output(Shape{3, 7}, plan::INT64);
    cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
  }
  {
    OpCall call("fill");
    call.Attribute("value", FloatAttribute(12.0)).Output(Shape{5}, plan::INT64);
    cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
  }
}

TEST(CudaElementwiseTest, ZerosLikeMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectBothTypesMatch([] {
    auto call = std::make_unique<OpCall>("zeros_like");
    call->Input(FloatTensor(Shape{17, 3}, RandomFloats(51, 51))).Output(Shape{17, 3});
    return call;
  });
  OpCall call("zeros_like");
  call.Input(Int64Tensor(Shape{5}, {1, 2, 3, 4, 5})).Output(Shape{5}, plan::INT64);
  cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
}

TEST(CudaElementwiseTest, OnesLikeMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectBothTypesMatch([] {
    auto call = std::make_unique<OpCall>("ones_like");
    call->Input(FloatTensor(Shape{1000003}, RandomFloats(1000003, 61))).Output(Shape{1000003});
    return call;
  });
  // Any input type; the output is float (bfloat16 in the second run).
  ExpectBothTypesMatch([] {
    auto call = std::make_unique<OpCall>("ones_like");
    call->Input(Int32Tensor(Shape{2, 3}, {1, 2, 3, 4, 5, 6})).Output(Shape{2, 3});
    return call;
  });
}

// ----- identity, reshape.

TEST(CudaElementwiseTest, IdentityMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectBothTypesMatch([] {
    auto call = std::make_unique<OpCall>("identity");
    call->Input(FloatTensor(Shape{1000003}, RandomFloats(1000003, 71))).Output(Shape{1000003});
    return call;
  });
  OpCall call("identity");
  call.Input(Int32Tensor(Shape{7}, {1, -2, 3, -4, 5, -6, 7})).Output(Shape{7}, plan::INT32);
  cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
}

TEST(CudaElementwiseTest, IdentityAfterMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("identity_after");
  call.Input(FloatTensor(Shape{4099}, RandomFloats(4099, 72)))
      .Input(Int32Tensor(Shape{2}, {1, 2}))
      .Input(FloatTensor(Shape{3}, RandomFloats(3, 74)))
      .Output(Shape{4099});
  cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
}

TEST(CudaElementwiseTest, CastMatchesTheCpuKernelBitForBit) {
  LOOM_SKIP_WITHOUT_GPU();
  // Both directions, exact (round to nearest even on both sides), odd length.
  OpCall down("cast");
  down.Input(FloatTensor(Shape{100003}, RandomFloats(100003, 73, -1000.0f, 1000.0f)))
      .Output(Shape{100003}, plan::BFLOAT16);
  cuda_test::ExpectCudaMatchesCpu(down, 0.0f);
  ASSERT_TRUE(down.Run().ok());
  OpCall up("cast");
  up.Input(down.output(0)).Output(Shape{100003});
  cuda_test::ExpectCudaMatchesCpu(up, 0.0f);
}

TEST(CudaElementwiseTest, ReshapeMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectBothTypesMatch([] {
    auto call = std::make_unique<OpCall>("reshape");
    call->Input(FloatTensor(Shape{6, 4}, RandomFloats(24, 81))).Output(Shape{2, 3, 4});
    return call;
  });
  OpCall call("reshape");
  call.Input(Int64Tensor(Shape{2, 3}, {1, 2, 3, 4, 5, 6})).Output(Shape{3, 2}, plan::INT64);
  cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
}

// ----- One kernel, several acts, buffers off the 16-byte alignment of the packed paths.

// A GPU buffer freed when it goes out of scope.
struct DeviceBuffer {
  void* data = nullptr;
  ~DeviceBuffer() { cudaFree(data); }
};

// Builds `call`'s CUDA kernel once and runs it `acts` times on float32 GPU buffers that start
// `offset_elements` elements past an allocation (which cudaMalloc aligns to 256 bytes); each act
// must give what the CPU kernel gives.
void ExpectActsMatchCpu(OpCall& call, int offset_elements, int acts) {
  ASSERT_TRUE(call.Run().ok());
  KernelInit init = call.Init();
  init.stream = &cuda_test::TestStream();
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cuda_test::Kernels().Create(plan::CUDA, init);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  const size_t offset_bytes = static_cast<size_t>(offset_elements) * sizeof(float);
  std::vector<DeviceBuffer> buffers(init.inputs.size() + init.outputs.size());
  std::vector<TensorView> inputs;
  for (size_t i = 0; i < init.inputs.size(); ++i) {
    const HostTensor& host = call.input(static_cast<int>(i));
    ASSERT_EQ(cudaMalloc(&buffers[i].data, host.bytes.size() + offset_bytes + 16), cudaSuccess);
    void* data = static_cast<char*>(buffers[i].data) + offset_bytes;
    ASSERT_EQ(cudaMemcpy(data, host.bytes.data(), host.bytes.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    inputs.push_back(TensorView{data, host.data_type, host.shape});
  }
  const HostTensor& expected = call.output(0);
  DeviceBuffer& output_buffer = buffers.back();
  ASSERT_EQ(cudaMalloc(&output_buffer.data, expected.bytes.size() + offset_bytes + 16),
            cudaSuccess);
  void* output_data = static_cast<char*>(output_buffer.data) + offset_bytes;
  std::vector<TensorView> outputs = {TensorView{output_data, expected.data_type, expected.shape}};
  const std::vector<float> want = kernel_test::FloatValues(expected);
  for (int act = 0; act < acts; ++act) {
    SCOPED_TRACE("act " + std::to_string(act));
    ASSERT_EQ(cudaMemset(output_data, 0x7f, expected.bytes.size()), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    KernelContext context{inputs, outputs, act};
    absl::Status status = (*kernel)->Compute(context);
    ASSERT_TRUE(status.ok()) << status;
    status = cuda_test::TestStream().Synchronize();
    ASSERT_TRUE(status.ok()) << status;
    std::vector<float> got(want.size());
    ASSERT_EQ(
        cudaMemcpy(got.data(), output_data, got.size() * sizeof(float), cudaMemcpyDeviceToHost),
        cudaSuccess);
    for (size_t j = 0; j < want.size(); ++j) {
      ASSERT_NEAR(got[j], want[j], kFloat32Tolerance * (1.0f + std::fabs(want[j])))
          << "element " << j;
    }
  }
}

TEST(CudaElementwiseTest, KernelsRunRepeatedlyOnUnalignedBuffers) {
  LOOM_SKIP_WITHOUT_GPU();
  for (int offset : {0, 1}) {
    SCOPED_TRACE("offset " + std::to_string(offset));
    {
      OpCall call("gelu");
      call.Input(FloatTensor(Shape{1003}, RandomFloats(1003, 91, -3.0f, 3.0f))).Output(Shape{1003});
      ExpectActsMatchCpu(call, offset, 2);
    }
    {
      OpCall call("subtract");
      call.Input(FloatTensor(Shape{1003}, RandomFloats(1003, 92)))
          .Input(FloatTensor(Shape{1003}, RandomFloats(1003, 93)))
          .Output(Shape{1003});
      ExpectActsMatchCpu(call, offset, 2);
    }
    {
      // The broadcast table is uploaded once, when the kernel is built; every act reads it.
      OpCall call("add");
      call.Input(FloatTensor(Shape{4, 1, 5}, RandomFloats(20, 94)))
          .Input(FloatTensor(Shape{3, 1}, RandomFloats(3, 95)))
          .Output(Shape{4, 3, 5});
      ExpectActsMatchCpu(call, offset, 3);
    }
    {
      OpCall call("bias_add");
      call.Input(FloatTensor(Shape{7, 64}, RandomFloats(448, 96)))
          .Input(FloatTensor(Shape{64}, RandomFloats(64, 97)))
          .Output(Shape{7, 64});
      ExpectActsMatchCpu(call, offset, 2);
    }
    {
      OpCall call("fill");
      call.Attribute("value", FloatAttribute(1.25)).Output(Shape{1003});
      ExpectActsMatchCpu(call, offset, 2);
    }
    {
      OpCall call("identity");
      call.Input(FloatTensor(Shape{1003}, RandomFloats(1003, 98))).Output(Shape{1003});
      ExpectActsMatchCpu(call, offset, 2);
    }
  }
}

// ----- Errors.

// Builds `call`'s op through the CUDA registry on the test stream.
absl::Status CreateOnCuda(const OpCall& call, plan::DataType input_type = plan::FLOAT32,
                          int retyped_input = -1) {
  KernelInit init = call.Init();
  init.stream = &cuda_test::TestStream();
  if (retyped_input >= 0) init.inputs[retyped_input].set_data_type(input_type);
  return cuda_test::Kernels().Create(plan::CUDA, init).status();
}

TEST(CudaElementwiseTest, RejectsIntegerInputs) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const std::string op_type : {"relu", "gelu", "tanh"}) {
    OpCall call(op_type);
    call.Input(Int32Tensor(Shape{3}, {1, 2, 3})).Output(Shape{3});
    absl::Status status = CreateOnCuda(call);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("test_task"));
    EXPECT_THAT(status.message(),
                HasSubstr(op_type + ": input 0 must be float32 or bfloat16, got int32"));
  }
  OpCall add("add");
  add.Input(Int32Tensor(Shape{3}, {1, 2, 3}))
      .Input(FloatTensor(Shape{3}, {1.0f, 2.0f, 3.0f}))
      .Output(Shape{3});
  absl::Status status = CreateOnCuda(add);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("test_task"));
}

TEST(CudaElementwiseTest, RejectsMixedFloatTypes) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("multiply");
  call.Input(FloatTensor(Shape{3}, {1.0f, 2.0f, 3.0f}))
      .Input(FloatTensor(Shape{3}, {1.0f, 2.0f, 3.0f}))
      .Output(Shape{3});
  absl::Status status = CreateOnCuda(call, plan::BFLOAT16, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("multiply: input 1 must be float32, got bfloat16"));
}

TEST(CudaElementwiseTest, RejectsWhatTheCpuKernelRejects) {
  LOOM_SKIP_WITHOUT_GPU();
  {
    OpCall call("add");
    call.Input(FloatTensor(Shape{2, 3}, RandomFloats(6, 1)))
        .Input(FloatTensor(Shape{4}, RandomFloats(4, 2)))
        .Output(Shape{2, 3});
    absl::Status status = CreateOnCuda(call);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("add: shapes [2, 3] and [4] do not broadcast"));
  }
  {
    OpCall call("bias_add");
    call.Input(FloatTensor(Shape{2, 3}, RandomFloats(6, 1)))
        .Input(FloatTensor(Shape{2}, RandomFloats(2, 2)))
        .Output(Shape{2, 3});
    absl::Status status = CreateOnCuda(call);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(status.message(), HasSubstr("bias must have shape [3]"));
  }
  {
    OpCall call("scale");
    call.Input(FloatTensor(Shape{2}, {1.0f, 2.0f})).Output(Shape{2});
    EXPECT_FALSE(CreateOnCuda(call).ok());  // "scale" is required.
  }
  {
    OpCall call("ones_like");
    call.Input(FloatTensor(Shape{2}, {1.0f, 2.0f})).Output(Shape{2}, plan::INT32);
    absl::Status status = CreateOnCuda(call);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  }
  {
    OpCall call("reshape");
    call.Input(FloatTensor(Shape{2, 3}, RandomFloats(6, 1))).Output(Shape{5});
    absl::Status status = CreateOnCuda(call);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  }
  {
    OpCall call("fill");
    call.Attribute("value", FloatAttribute(0.5)).Output(Shape{2}, plan::INT32);
    absl::Status status = CreateOnCuda(call);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  }
}

TEST(CudaElementwiseTest, NeedsACudaStream) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("relu");
  call.Input(FloatTensor(Shape{2}, {1.0f, -2.0f})).Output(Shape{2});
  KernelInit init = call.Init();
  init.stream = nullptr;
  absl::Status status = cuda_test::Kernels().Create(plan::CUDA, init).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
}

}  // namespace
}  // namespace loom
