#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/data_type.h"
#include "device/cuda/cuda_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

using kernel_test::BoolAttribute;
using kernel_test::FloatAttribute;
using kernel_test::FloatTensor;
using kernel_test::IntAttribute;
using kernel_test::MakeTensor;
using kernel_test::OpCall;
using kernel_test::RandomFloats;
using ::testing::HasSubstr;

// A GPU buffer freed when it goes out of scope.
struct DeviceBuffer {
  void* data = nullptr;
  ~DeviceBuffer() {
    if (data != nullptr) cudaFree(data);
  }
};

// Builds `call`'s CUDA kernel once and runs it on each of `pieces` (cuda_test::RunOnCuda runs
// piece 0 only), with the call's inputs copied to the GPU afresh before each piece. When
// `output_to_input` is given, output j is written into the GPU buffer of input
// output_to_input[j] (-1: a buffer of its own), in place as the runtime updates parameters.
// Returns the outputs of each piece.
absl::StatusOr<std::vector<std::vector<HostTensor>>> RunCudaPieces(
    OpCall& call, const std::vector<int64_t>& pieces, std::vector<int> output_to_input = {}) {
  KernelInit init = call.Init();
  init.stream = &cuda_test::TestStream();
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cuda_test::Kernels().Create(plan::CUDA, init);
  if (!kernel.ok()) return kernel.status();
  const size_t input_count = init.inputs.size();
  const size_t output_count = init.outputs.size();
  output_to_input.resize(output_count, -1);
  std::vector<DeviceBuffer> buffers(input_count + output_count);
  std::vector<TensorView> inputs;
  std::vector<TensorView> outputs;
  for (size_t i = 0; i < input_count; ++i) {
    const HostTensor& host = call.input(static_cast<int>(i));
    const size_t bytes = std::max<size_t>(host.bytes.size(), 1);
    if (absl::Status status = cuda::CudaStatus(cudaMalloc(&buffers[i].data, bytes), "test input");
        !status.ok()) {
      return status;
    }
    inputs.push_back(TensorView{buffers[i].data, host.data_type, host.shape});
  }
  for (size_t j = 0; j < output_count; ++j) {
    const HostTensor& host = call.output(static_cast<int>(j));
    void* data = nullptr;
    if (output_to_input[j] >= 0) {
      data = buffers[output_to_input[j]].data;
    } else {
      DeviceBuffer& buffer = buffers[input_count + j];
      const size_t bytes = std::max<size_t>(host.bytes.size(), 1);
      if (absl::Status status = cuda::CudaStatus(cudaMalloc(&buffer.data, bytes), "test output");
          !status.ok()) {
        return status;
      }
      data = buffer.data;
    }
    outputs.push_back(TensorView{data, host.data_type, host.shape});
  }
  std::vector<std::vector<HostTensor>> results;
  for (int64_t piece : pieces) {
    for (size_t i = 0; i < input_count; ++i) {
      const HostTensor& host = call.input(static_cast<int>(i));
      cudaMemcpy(inputs[i].data, host.bytes.data(), host.bytes.size(), cudaMemcpyHostToDevice);
    }
    for (size_t j = 0; j < output_count; ++j) {
      // Garbage, not zeros: the kernel must write every output element.
      if (output_to_input[j] < 0) {
        cudaMemset(outputs[j].data, 0x7f, std::max<int64_t>(outputs[j].ByteSize(), 1));
      }
    }
    if (absl::Status status = cuda::CudaStatus(cudaDeviceSynchronize(), "preparing the test");
        !status.ok()) {
      return status;
    }
    KernelContext context{inputs, outputs, piece};
    if (absl::Status status = (*kernel)->Compute(context); !status.ok()) return status;
    if (absl::Status status = cuda_test::TestStream().Synchronize(); !status.ok()) return status;
    std::vector<HostTensor> piece_outputs;
    for (size_t j = 0; j < output_count; ++j) {
      HostTensor host = MakeTensor(outputs[j].shape, outputs[j].data_type);
      cudaMemcpy(host.bytes.data(), outputs[j].data, host.bytes.size(), cudaMemcpyDeviceToHost);
      piece_outputs.push_back(std::move(host));
    }
    results.push_back(std::move(piece_outputs));
  }
  return results;
}
// Runs the CPU kernel (OpCall::Run(piece)) and the CUDA kernel on each piece and expects the
// outputs to agree.
void ExpectPiecesMatchCpu(OpCall& call, const std::vector<int64_t>& pieces, float tolerance,
                          const std::vector<int>& output_to_input = {}) {
  absl::StatusOr<std::vector<std::vector<HostTensor>>> cuda =
      RunCudaPieces(call, pieces, output_to_input);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  for (size_t p = 0; p < pieces.size(); ++p) {
    SCOPED_TRACE("piece " + std::to_string(pieces[p]));
    absl::Status status = call.Run(pieces[p]);
    ASSERT_TRUE(status.ok()) << status;
    for (size_t j = 0; j < (*cuda)[p].size(); ++j) {
      SCOPED_TRACE("output " + std::to_string(j));
      cuda_test::ExpectSameTensor(call.output(static_cast<int>(j)), (*cuda)[p][j], tolerance);
    }
  }
}

// The CUDA factory fails as the CPU factory does: same code, same message.
void ExpectSameBuildError(const OpCall& call) {
  absl::Status cpu = call.Build().status();
  ASSERT_FALSE(cpu.ok());
  KernelInit init = call.Init();
  init.stream = &cuda_test::TestStream();
  absl::Status cuda = cuda_test::Kernels().Create(plan::CUDA, init).status();
  EXPECT_EQ(cuda.code(), cpu.code());
  EXPECT_EQ(cuda.message(), cpu.message());
}

// ---------------------------------------------------------------------------------------------
// sgd

struct SgdConfig {
  double lr = 0.1;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// As tests/kernels/optimizers/sgd_kernel_test.cc describes an sgd call, with random tensors.
void DescribeSgd(OpCall& call, const Shape& shape, const SgdConfig& config) {
  const int64_t count = shape.NumElements();
  call.Attribute("lr", FloatAttribute(config.lr))
      .Attribute("momentum", FloatAttribute(config.momentum))
      .Attribute("dampening", FloatAttribute(config.dampening))
      .Attribute("weight_decay", FloatAttribute(config.weight_decay))
      .Attribute("nesterov", BoolAttribute(config.nesterov))
      .Input(FloatTensor(shape, RandomFloats(count, 1)))
      .Input(FloatTensor(shape, RandomFloats(count, 2, -3.0f, 3.0f)))
      .Input(FloatTensor(shape, RandomFloats(count, 3)))
      .Output(shape)
      .Output(shape);
}

const std::vector<SgdConfig>& SgdConfigs() {
  static const auto* configs = new std::vector<SgdConfig>{
      {},
      {.lr = 0.01, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
      {.lr = 0.1, .momentum = 0.8, .weight_decay = 1e-4, .nesterov = true},
      {.lr = 0.3, .weight_decay = 0.5},
  };
  return *configs;
}

const std::vector<Shape>& Shapes() {
  static const auto* shapes =
      new std::vector<Shape>{Shape{1}, Shape{7}, Shape{1000}, Shape{3, 67}, Shape{70001}};
  return *shapes;
}

TEST(CudaSgdTest, Float32MatchesTheCpuKernelBitForBit) {
  LOOM_SKIP_WITHOUT_GPU();
  // The same float32 operations in the same order with the same fused multiply-adds.
  for (const SgdConfig& config : SgdConfigs()) {
    for (const Shape& shape : Shapes()) {
      SCOPED_TRACE("momentum " + std::to_string(config.momentum) + " " + shape.ToString());
      OpCall call("sgd");
      DescribeSgd(call, shape, config);
      cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
    }
  }
}

TEST(CudaSgdTest, LaterPiecesAndResumedRunsMatchTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const SgdConfig& config : SgdConfigs()) {
    OpCall call("sgd");
    DescribeSgd(call, Shape{1000}, config);
    // Piece 0 sets the buffer to the gradient; later pieces (and the same kernel run again on an
    // earlier piece) use it.
    ExpectPiecesMatchCpu(call, {0, 1, 5, 0}, 0.0f);

    OpCall resumed("sgd");
    DescribeSgd(resumed, Shape{513}, config);
    resumed.Attribute("first_step", IntAttribute(3));
    ExpectPiecesMatchCpu(resumed, {0, 2}, 0.0f);
  }
}

TEST(CudaSgdTest, InPlaceUpdateMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const SgdConfig& config : SgdConfigs()) {
    OpCall call("sgd");
    DescribeSgd(call, Shape{4099}, config);
    // param_out into param, momentum_buffer_out into momentum_buffer.
    ExpectPiecesMatchCpu(call, {0, 3}, 0.0f, {0, 2});
  }
}

TEST(CudaSgdTest, FactoryErrorsAreTheCpuKernels) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall nesterov("sgd", "sgd_task");
  DescribeSgd(nesterov, Shape{4}, {.nesterov = true});
  ExpectSameBuildError(nesterov);

  OpCall no_lr("sgd", "sgd_task");
  no_lr.Input(MakeTensor({4})).Input(MakeTensor({4})).Input(MakeTensor({4}));
  no_lr.Output({4}).Output({4});
  ExpectSameBuildError(no_lr);

  OpCall integer_grad("sgd", "sgd_task");
  integer_grad.Attribute("lr", FloatAttribute(0.1));
  integer_grad.Input(MakeTensor({4})).Input(MakeTensor({4}, plan::INT32)).Input(MakeTensor({4}));
  integer_grad.Output({4}).Output({4});
  ExpectSameBuildError(integer_grad);

  // bfloat16 state is refused: the optimizers keep float32 master weights.
  OpCall bfloat16("sgd", "sgd_task");
  DescribeSgd(bfloat16, Shape{4}, {});
  KernelInit init = bfloat16.Init();
  init.stream = &cuda_test::TestStream();
  init.inputs[1].set_data_type(plan::BFLOAT16);
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cuda_test::Kernels().Create(plan::CUDA, init);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(kernel.status().message(), HasSubstr("task 'sgd_task'"));
  EXPECT_THAT(kernel.status().message(), HasSubstr("sgd: input 'grad' must be float32"));
}

TEST(CudaSgdTest, NegativePieceIsRefused) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("sgd");
  DescribeSgd(call, Shape{4}, {});
  absl::StatusOr<std::vector<std::vector<HostTensor>>> result = RunCudaPieces(call, {-1});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("sgd: the piece is the index"));
}

TEST(CudaSgdTest, AKernelOnACpuStreamIsRefused) {
  // No GPU needed: the factory looks at the stream before touching CUDA.
  OpCall call("sgd", "misplaced");
  DescribeSgd(call, Shape{4}, {});
  SynchronousStreamContext cpu_stream;
  KernelInit init = call.Init();
  init.stream = &cpu_stream;
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cuda_test::Kernels().Create(plan::CUDA, init);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(kernel.status().message(), HasSubstr("task 'misplaced'"));
}

// ---------------------------------------------------------------------------------------------
// adamw

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.01;
};

// As tests/kernels/optimizers/adamw_kernel_test.cc describes an adamw call, with random tensors
// (exp_avg_sq non-negative, as a second moment is).
void DescribeAdamW(OpCall& call, const Shape& shape, const AdamWConfig& config) {
  const int64_t count = shape.NumElements();
  call.Attribute("lr", FloatAttribute(config.lr))
      .Attribute("beta1", FloatAttribute(config.beta1))
      .Attribute("beta2", FloatAttribute(config.beta2))
      .Attribute("epsilon", FloatAttribute(config.epsilon))
      .Attribute("weight_decay", FloatAttribute(config.weight_decay))
      .Input(FloatTensor(shape, RandomFloats(count, 11)))
      .Input(FloatTensor(shape, RandomFloats(count, 12, -2.0f, 2.0f)))
      .Input(FloatTensor(shape, RandomFloats(count, 13, -0.1f, 0.1f)))
      .Input(FloatTensor(shape, RandomFloats(count, 14, 0.0f, 0.01f)))
      .Output(shape)
      .Output(shape)
      .Output(shape);
}

const std::vector<AdamWConfig>& AdamWConfigs() {
  static const auto* configs = new std::vector<AdamWConfig>{
      {},
      {.lr = 1e-2, .beta1 = 0.8, .beta2 = 0.99, .epsilon = 1e-6, .weight_decay = 0.1},
      {.lr = 3e-4, .beta1 = 0.0, .beta2 = 0.95, .epsilon = 0.0, .weight_decay = 0.0},
  };
  return *configs;
}

TEST(CudaAdamWTest, Float32MatchesTheCpuKernelBitForBit) {
  LOOM_SKIP_WITHOUT_GPU();
  // The scalars are computed on the host by the same code, the element math with the CPU's
  // float32 operations in its order (two fused multiply-adds, nothing else fused): tolerance 0.
  for (const AdamWConfig& config : AdamWConfigs()) {
    for (const Shape& shape : Shapes()) {
      SCOPED_TRACE("lr " + std::to_string(config.lr) + " " + shape.ToString());
      OpCall call("adamw");
      DescribeAdamW(call, shape, config);
      cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
    }
  }
}

TEST(CudaAdamWTest, LaterPiecesAndResumedRunsMatchTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const AdamWConfig& config : AdamWConfigs()) {
    OpCall call("adamw");
    DescribeAdamW(call, Shape{1000}, config);
    ExpectPiecesMatchCpu(call, {0, 1, 9, 999, 0}, 0.0f);

    OpCall resumed("adamw");
    DescribeAdamW(resumed, Shape{257}, config);
    resumed.Attribute("first_step", IntAttribute(41));
    ExpectPiecesMatchCpu(resumed, {0, 7}, 0.0f);
  }
}

TEST(CudaAdamWTest, InPlaceUpdateMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("adamw");
  DescribeAdamW(call, Shape{70001}, {});
  // param_out into param, exp_avg_out into exp_avg, exp_avg_sq_out into exp_avg_sq.
  ExpectPiecesMatchCpu(call, {0, 4}, 0.0f, {0, 2, 3});
}

TEST(CudaAdamWTest, FactoryErrorsAreTheCpuKernels) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall bad_beta("adamw", "adam_task");
  DescribeAdamW(bad_beta, Shape{4}, {.beta2 = 1.5});
  ExpectSameBuildError(bad_beta);

  OpCall bad_state("adamw", "adam_task");
  bad_state.Attribute("lr", FloatAttribute(1e-3));
  bad_state.Input(MakeTensor({2, 3})).Input(MakeTensor({2, 3})).Input(MakeTensor({2, 3}));
  bad_state.Input(MakeTensor({6}));
  bad_state.Output({2, 3}).Output({2, 3}).Output({2, 3});
  ExpectSameBuildError(bad_state);

  OpCall missing_output("adamw", "adam_task");
  missing_output.Attribute("lr", FloatAttribute(1e-3));
  missing_output.Input(MakeTensor({4})).Input(MakeTensor({4})).Input(MakeTensor({4}));
  missing_output.Input(MakeTensor({4})).Output({4}).Output({4});
  ExpectSameBuildError(missing_output);
}

TEST(CudaAdamWTest, NegativePieceIsRefused) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("adamw");
  DescribeAdamW(call, Shape{4}, {});
  absl::StatusOr<std::vector<std::vector<HostTensor>>> result = RunCudaPieces(call, {-3});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("adamw: the piece is the index"));
}

// ---------------------------------------------------------------------------------------------
// squared_norm, clip_coefficient, scale_by

TEST(CudaSquaredNormTest, MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  // Both accumulate the (exact) squares in double, in different orders (the GPU: per-block
  // partials, then one block over them); the float32 results agree to a few ulp at most.
  for (const Shape& shape : {Shape{0}, Shape{1}, Shape{255}, Shape{257}, Shape{10007},
                             Shape{3, 1000}, Shape{(1 << 20) + 5}}) {
    SCOPED_TRACE(shape.ToString());
    OpCall call("squared_norm");
    call.Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 21, -4.0f, 4.0f))).Output({1});
    cuda_test::ExpectCudaMatchesCpu(call, 1e-6f);
  }
}

TEST(CudaSquaredNormTest, IsDeterministic) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("squared_norm");
  call.Input(FloatTensor({123457}, RandomFloats(123457, 22))).Output({1});
  absl::StatusOr<std::vector<std::vector<HostTensor>>> runs = RunCudaPieces(call, {0, 1, 2});
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ((*runs)[0][0].bytes, (*runs)[1][0].bytes);
  EXPECT_EQ((*runs)[0][0].bytes, (*runs)[2][0].bytes);
}

TEST(CudaClipCoefficientTest, MatchesTheCpuKernelBitForBit) {
  LOOM_SKIP_WITHOUT_GPU();
  for (double max_norm : {1.0, 0.5, 5.0}) {
    for (float total_squared_norm : {0.0f, 1e-12f, 0.25f, 1.0f, 4.0f, 24.999f, 100.0f, 1e6f,
                                     3.4e38f, std::numeric_limits<float>::infinity()}) {
      SCOPED_TRACE(std::to_string(max_norm) + " " + std::to_string(total_squared_norm));
      OpCall call("clip_coefficient");
      call.Attribute("max_norm", FloatAttribute(max_norm))
          .Input(FloatTensor({1}, {total_squared_norm}))
          .Output({1});
      cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
    }
  }
}

TEST(CudaClipCoefficientTest, NanNormGivesNan) {
  LOOM_SKIP_WITHOUT_GPU();
  for (float total_squared_norm : {std::numeric_limits<float>::quiet_NaN(), -1.0f}) {
    OpCall call("clip_coefficient");
    call.Attribute("max_norm", FloatAttribute(1.0))
        .Input(FloatTensor({1}, {total_squared_norm}))
        .Output({1});
    absl::StatusOr<std::vector<HostTensor>> result = cuda_test::RunOnCuda(call);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(std::isnan(kernel_test::FloatValues((*result)[0])[0]));
  }
}

TEST(CudaScaleByTest, MatchesTheCpuKernelBitForBit) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const Shape& shape : Shapes()) {
    for (float coefficient : {0.37f, 1.0f, 0.0f}) {
      SCOPED_TRACE(shape.ToString() + " x " + std::to_string(coefficient));
      OpCall call("scale_by");
      call.Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 31, -5.0f, 5.0f)))
          .Input(FloatTensor({1}, {coefficient}))
          .Output(shape);
      cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
    }
  }
}

TEST(CudaScaleByTest, InPlace) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("scale_by");
  call.Input(FloatTensor({70001}, RandomFloats(70001, 32)))
      .Input(FloatTensor({1}, {-0.625f}))
      .Output({70001});
  ExpectPiecesMatchCpu(call, {0}, 0.0f, {0});
}

TEST(CudaClipGradTest, FactoryErrorsAreTheCpuKernels) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall no_max_norm("clip_coefficient", "clip");
  no_max_norm.Input(MakeTensor({1})).Output({1});
  ExpectSameBuildError(no_max_norm);

  OpCall zero_max_norm("clip_coefficient", "clip");
  zero_max_norm.Attribute("max_norm", FloatAttribute(0.0));
  zero_max_norm.Input(MakeTensor({1})).Output({1});
  ExpectSameBuildError(zero_max_norm);

  OpCall scalar_output("squared_norm", "norm");
  scalar_output.Input(MakeTensor({3})).Output({});
  ExpectSameBuildError(scalar_output);

  OpCall bfloat16_norm("squared_norm", "norm");
  bfloat16_norm.Input(MakeTensor({3}, plan::BFLOAT16)).Output({1});
  ExpectSameBuildError(bfloat16_norm);

  OpCall other_output("scale_by", "scale");
  other_output.Input(MakeTensor({3})).Input(MakeTensor({1})).Output({4});
  ExpectSameBuildError(other_output);

  OpCall integer_x("scale_by", "scale");
  integer_x.Input(MakeTensor({3}, plan::INT32)).Input(MakeTensor({1})).Output({3});
  ExpectSameBuildError(integer_x);
}

}  // namespace
}  // namespace loom
