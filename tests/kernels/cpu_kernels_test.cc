#include "kernels/cpu/cpu_kernels.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/kernel_registry.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

TEST(CpuKernelsTest, RegistersEveryOpOnCpuOnly) {
  KernelRegistry registry;
  ASSERT_TRUE(RegisterCpuKernels(&registry).ok());
  EXPECT_THAT(registry.OpTypes(plan::CPU),
              ::testing::ElementsAre(
                  "adamw", "add", "bias_add", "broadcast_to", "cast", "causal_attention",
                  "causal_attention_grad", "clip_coefficient", "concat", "divide", "embedding",
                  "embedding_grad", "fill", "gelu", "gelu_grad", "identity", "identity_after",
                  "layer_norm", "layer_norm_grad", "log_softmax", "log_softmax_grad", "matmul",
                  "moe_combine", "moe_dispatch", "moe_dispatch_grad", "moe_route", "moe_route_grad",
                  "multiply", "offload", "ones_like", "pack_flat", "pack_shards", "pad", "random",
                  "random_integers", "reduce_mean", "reduce_sum", "reduce_sum_to", "reload", "relu",
                  "relu_grad", "reshape", "safetensors_slice", "scale", "scale_by", "sgd", "sleep",
                  "slice", "softmax", "softmax_grad", "sparse_cross_entropy",
                  "sparse_cross_entropy_grad", "squared_norm", "subtract", "tanh", "tanh_grad",
                  "token_batch", "token_dataset", "transpose", "unpack_flat", "unpack_shards", "zeros_like"));
  EXPECT_TRUE(registry.OpTypes(plan::CUDA).empty());
}

TEST(CpuKernelsTest, RegisteringTwiceFails) {
  KernelRegistry registry;
  ASSERT_TRUE(RegisterCpuKernels(&registry).ok());
  EXPECT_EQ(RegisterCpuKernels(&registry).code(), absl::StatusCode::kAlreadyExists);
}

TEST(CpuKernelsTest, UnknownOpTypeIsNotFound) {
  OpCall call("convolution", "conv1");
  call.Input(MakeTensor({2})).Output({2});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("task 'conv1': no kernel for op type 'convolution'"));
}

TEST(CpuKernelsTest, FactoryErrorsNameTaskAndOp) {
  OpCall call("add", "sum0");
  call.Input(MakeTensor({2})).Output({2});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "task 'sum0' (op 'add'): add: expects 2 inputs and 1 output, got 1 input and 1 output");
}

TEST(CpuKernelsTest, RejectsNegativeDimensions) {
  OpCall call("relu");
  call.Input(MakeTensor({})).Output({});
  call.input(0).shape = Shape({2, -1});
  call.output(0).shape = Shape({2, -1});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("relu: input 0 has shape [2, -1] with a negative"));
}

TEST(CpuKernelsTest, ComputeRejectsTensorsOtherThanDeclared) {
  OpCall built("add");
  built.Input(MakeTensor({2, 3})).Input(MakeTensor({3})).Output({2, 3});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = built.Build();
  ASSERT_TRUE(kernel.ok()) << kernel.status();

  OpCall other_shape("add");
  other_shape.Input(MakeTensor({2, 4})).Input(MakeTensor({3})).Output({2, 3});
  absl::Status status = other_shape.Compute(**kernel);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("add: input 0 is float32[2, 4] at compute time but the kernel was built "
                        "for float32[2, 3]"));

  OpCall missing_output("add");
  missing_output.Input(MakeTensor({2, 3})).Input(MakeTensor({3}));
  EXPECT_THAT(missing_output.Compute(**kernel).message(),
              HasSubstr("built for 1 output but computed with 0"));
}

}  // namespace
}  // namespace loom::kernel_test
