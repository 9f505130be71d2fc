#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

using kernel_test::FloatAttribute;
using kernel_test::FloatTensor;
using kernel_test::MakeTensor;
using kernel_test::OpCall;
using kernel_test::RandomFloats;
using ::testing::HasSubstr;

struct AttentionCase {
  Shape shape;
  // <= 0 leaves the attribute out (the default 1 / sqrt(Dh)).
  double scale = 0.0;
};

const std::vector<AttentionCase>& Cases() {
  static const auto* cases = new std::vector<AttentionCase>{
      // T not a multiple of the warp, several heads.
      {Shape{2, 3, 37, 16}},
      // T = 128 (four warp-wide passes per row), several heads.
      {Shape{1, 4, 128, 32}},
      // A given scale; rows longer than a few warps, a head size that is not a power of 2.
      {Shape{1, 2, 200, 24}, 0.3},
      // One position: the probabilities are all 1.
      {Shape{3, 1, 1, 4}, 2.0},
  };
  return *cases;
}

// A tensor of `values` in `data_type` (bfloat16: rounded), the CPU kernels' inputs too: with
// bfloat16 both sides run the bfloat16 kernels.
HostTensor Operand(const Shape& shape, const std::vector<float>& values, plan::DataType data_type) {
  if (data_type != plan::BFLOAT16) return FloatTensor(shape, values);
  std::vector<float> rounded;
  return kernel_test::Bfloat16Tensor(shape, values, &rounded);
}

// Builds "causal_attention" as tests/kernels/attention_kernel_test.cc does.
void ExpectAttentionMatches(const AttentionCase& test_case, plan::DataType data_type,
                            float tolerance) {
  const Shape& shape = test_case.shape;
  const int64_t count = shape.NumElements();
  OpCall call("causal_attention");
  if (test_case.scale > 0.0) call.Attribute("scale", FloatAttribute(test_case.scale));
  call.Input(Operand(shape, RandomFloats(count, 71, -2.0f, 2.0f), data_type))
      .Input(Operand(shape, RandomFloats(count, 72, -2.0f, 2.0f), data_type))
      .Input(Operand(shape, RandomFloats(count, 73), data_type))
      .Output(shape, data_type);
  cuda_test::ExpectCudaMatchesCpu(call, tolerance);
}

// Builds "causal_attention_grad" as tests/kernels/gradients/attention_grad_kernel_test.cc does.
void ExpectAttentionGradMatches(const AttentionCase& test_case, plan::DataType data_type,
                                float tolerance) {
  const Shape& shape = test_case.shape;
  const int64_t count = shape.NumElements();
  OpCall call("causal_attention_grad");
  if (test_case.scale > 0.0) call.Attribute("scale", FloatAttribute(test_case.scale));
  call.Input(Operand(shape, RandomFloats(count, 101, -1.5f, 1.5f), data_type))
      .Input(Operand(shape, RandomFloats(count, 102, -1.5f, 1.5f), data_type))
      .Input(Operand(shape, RandomFloats(count, 103), data_type))
      .Input(Operand(shape, RandomFloats(count, 104, -2.0f, 2.0f), data_type))
      .Output(shape, data_type)
      .Output(shape, data_type)
      .Output(shape, data_type);
  cuda_test::ExpectCudaMatchesCpu(call, tolerance);
}

TEST(CudaCausalAttentionTest, Float32MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const AttentionCase& test_case : Cases()) {
    SCOPED_TRACE(test_case.shape.ToString());
    ExpectAttentionMatches(test_case, plan::FLOAT32, 1e-5f);
  }
}

TEST(CudaCausalAttentionTest, Bfloat16MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  // Both round the probabilities to bfloat16 before the product with v, and the output: they
  // differ by summation order (and a probability that rounds the other way near a tie).
  for (const AttentionCase& test_case : Cases()) {
    SCOPED_TRACE(test_case.shape.ToString());
    ExpectAttentionMatches(test_case, plan::BFLOAT16, 8e-3f);
  }
}

TEST(CudaCausalAttentionGradTest, Float32MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const AttentionCase& test_case : Cases()) {
    SCOPED_TRACE(test_case.shape.ToString());
    ExpectAttentionGradMatches(test_case, plan::FLOAT32, 1e-5f);
  }
}

TEST(CudaCausalAttentionGradTest, Bfloat16MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  // Both round P and dS to bfloat16 before the last three products, and the outputs.
  for (const AttentionCase& test_case : Cases()) {
    SCOPED_TRACE(test_case.shape.ToString());
    ExpectAttentionGradMatches(test_case, plan::BFLOAT16, 1e-2f);
  }
}

// GPU memory for one tensor, freed at the end of the test.
struct GpuBuffer {
  void* data = nullptr;
  GpuBuffer() = default;
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;
  ~GpuBuffer() {
    if (data != nullptr) cudaFree(data);
  }
};

// Runs `kernel` (built for float32 tensors of `shape`) once on `inputs` and returns its
// `output_count` outputs.
std::vector<std::vector<float>> ComputeOnGpu(Kernel& kernel, const Shape& shape,
                                             const std::vector<std::vector<float>>& inputs,
                                             int output_count) {
  const size_t bytes = static_cast<size_t>(shape.NumElements()) * sizeof(float);
  std::vector<GpuBuffer> buffers(inputs.size() + output_count);
  std::vector<TensorView> input_views;
  std::vector<TensorView> output_views;
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(cudaMalloc(&buffers[i].data, bytes), cudaSuccess);
    if (i < inputs.size()) {
      EXPECT_EQ(cudaMemcpy(buffers[i].data, inputs[i].data(), bytes, cudaMemcpyHostToDevice),
                cudaSuccess);
      input_views.push_back(TensorView{buffers[i].data, plan::FLOAT32, shape});
    } else {
      // Garbage, not zeros: every output element must be written.
      EXPECT_EQ(cudaMemset(buffers[i].data, 0x7f, bytes), cudaSuccess);
      output_views.push_back(TensorView{buffers[i].data, plan::FLOAT32, shape});
    }
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  KernelContext context{input_views, output_views, 0};
  absl::Status status = kernel.Compute(context);
  EXPECT_TRUE(status.ok()) << status;
  status = cuda_test::TestStream().Synchronize();
  EXPECT_TRUE(status.ok()) << status;
  std::vector<std::vector<float>> outputs(output_count,
                                          std::vector<float>(shape.NumElements(), 0.0f));
  for (int i = 0; i < output_count; ++i) {
    EXPECT_EQ(cudaMemcpy(outputs[i].data(), output_views[i].data, bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return outputs;
}

TEST(CudaCausalAttentionGradTest, OneKernelRunTwiceMatchesTheCpuKernelBothTimes) {
  LOOM_SKIP_WITHOUT_GPU();
  // The scratch carries nothing from one act to the next.
  const Shape shape({2, 2, 37, 8});
  const int64_t count = shape.NumElements();
  std::unique_ptr<Kernel> kernel;
  for (uint32_t round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    std::vector<std::vector<float>> inputs;
    for (uint32_t input = 0; input < 4; ++input) {
      inputs.push_back(RandomFloats(count, 111 + 10 * round + input, -1.5f, 1.5f));
    }
    OpCall call("causal_attention_grad");
    for (const std::vector<float>& values : inputs) call.Input(FloatTensor(shape, values));
    call.Output(shape).Output(shape).Output(shape);
    if (kernel == nullptr) {
      KernelInit init = call.Init();
      init.stream = &cuda_test::TestStream();
      absl::StatusOr<std::unique_ptr<Kernel>> made = cuda_test::Kernels().Create(plan::CUDA, init);
      ASSERT_TRUE(made.ok()) << made.status();
      kernel = std::move(*made);
    }
    ASSERT_TRUE(call.Run().ok());
    const std::vector<std::vector<float>> got = ComputeOnGpu(*kernel, shape, inputs, 3);
    for (int output = 0; output < 3; ++output) {
      const std::vector<float> want = call.OutputFloats(output);
      int reported = 0;
      for (int64_t i = 0; i < count; ++i) {
        if (!(std::fabs(want[i] - got[output][i]) <= 1e-5f * (1.0f + std::fabs(want[i]))) &&
            reported++ < 5) {
          ADD_FAILURE() << "output " << output << " element " << i << ": cpu " << want[i]
                        << ", cuda " << got[output][i];
        }
      }
    }
  }
}

absl::Status CreateOnCuda(const OpCall& call) {
  KernelInit init = call.Init();
  init.stream = &cuda_test::TestStream();
  return cuda_test::Kernels().Create(plan::CUDA, init).status();
}

TEST(CudaCausalAttentionTest, BadConfigurationsAreRejectedAsOnTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall shapes("causal_attention", "bad_attention");
  shapes.Input(MakeTensor({1, 2, 4, 8}))
      .Input(MakeTensor({1, 2, 5, 8}))
      .Input(MakeTensor({1, 2, 4, 8}))
      .Output({1, 2, 4, 8});
  absl::Status status = CreateOnCuda(shapes);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("causal_attention: input 'k' has shape [1, 2, 5, 8] but q has shape "
                        "[1, 2, 4, 8]"));

  OpCall rank("causal_attention");
  rank.Input(MakeTensor({2, 4, 8}))
      .Input(MakeTensor({2, 4, 8}))
      .Input(MakeTensor({2, 4, 8}))
      .Output({2, 4, 8});
  status = CreateOnCuda(rank);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("causal_attention: q must have rank 4 [B, H, T, Dh], got [2, 4, 8]"));

  OpCall data_type("causal_attention");
  data_type.Input(MakeTensor({1, 1, 2, 2}))
      .Input(MakeTensor({1, 1, 2, 2}))
      .Input(MakeTensor({1, 1, 2, 2}, plan::INT32))
      .Output({1, 1, 2, 2});
  status = CreateOnCuda(data_type);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("causal_attention: input 'v' must be float32, got int32"));

  // bfloat16 q: every tensor must be bfloat16.
  OpCall mixed("causal_attention");
  mixed.Input(MakeTensor({1, 1, 2, 2}, plan::BFLOAT16))
      .Input(MakeTensor({1, 1, 2, 2}, plan::BFLOAT16))
      .Input(MakeTensor({1, 1, 2, 2}, plan::BFLOAT16))
      .Output({1, 1, 2, 2}, plan::FLOAT32);
  status = CreateOnCuda(mixed);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("causal_attention: output must be bfloat16, got float32"));
}

TEST(CudaCausalAttentionGradTest, BadConfigurationsAreRejectedAsOnTheCpu) {
  LOOM_SKIP_WITHOUT_GPU();
  const Shape shape({1, 2, 3, 4});
  OpCall arity("causal_attention_grad");
  arity.Input(MakeTensor(shape)).Input(MakeTensor(shape)).Input(MakeTensor(shape)).Output(shape);
  absl::Status status = CreateOnCuda(arity);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("causal_attention_grad: expects 4 inputs and 3 "
                                          "outputs, got 3 inputs and 1 output"));

  OpCall mismatch("causal_attention_grad");
  mismatch.Input(MakeTensor(shape))
      .Input(MakeTensor(shape))
      .Input(MakeTensor(shape))
      .Input(MakeTensor(shape))
      .Output(shape)
      .Output({1, 2, 3, 5})
      .Output(shape);
  status = CreateOnCuda(mismatch);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("causal_attention_grad: output 'dk' has shape [1, 2, 3, "
                                          "5] but input 'q' has shape [1, 2, 3, 4]"));

  OpCall type("causal_attention_grad");
  type.Input(MakeTensor(shape))
      .Input(MakeTensor(shape))
      .Input(MakeTensor(shape))
      .Input(MakeTensor(shape, plan::INT64))
      .Output(shape)
      .Output(shape)
      .Output(shape);
  status = CreateOnCuda(type);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("causal_attention_grad: input 'dy' must be float32, got int64"));

  OpCall scale("causal_attention_grad");
  scale.Attribute("scale", FloatAttribute(INFINITY));
  for (int input = 0; input < 4; ++input) scale.Input(MakeTensor(shape, plan::BFLOAT16));
  scale.Output(shape, plan::BFLOAT16).Output(shape, plan::BFLOAT16).Output(shape, plan::BFLOAT16);
  status = CreateOnCuda(scale);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("causal_attention_grad: attribute 'scale' must be finite, got inf"));
}

TEST(CudaCausalAttentionTest, AKernelOnACpuStreamIsRefused) {
  // No GPU needed: the factory looks at the stream before touching CUDA.
  const Shape shape({1, 1, 2, 2});
  OpCall call("causal_attention", "misplaced");
  call.Input(MakeTensor(shape)).Input(MakeTensor(shape)).Input(MakeTensor(shape)).Output(shape);
  SynchronousStreamContext cpu_stream;
  KernelInit init = call.Init();
  init.stream = &cpu_stream;
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cuda_test::Kernels().Create(plan::CUDA, init);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(kernel.status().message(), HasSubstr("task 'misplaced'"));
}

}  // namespace
}  // namespace loom
