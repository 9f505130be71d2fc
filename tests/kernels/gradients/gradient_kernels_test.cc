#include "kernels/cpu/gradients/gradient_kernels.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_registry.h"

namespace loom {
namespace {

using ::testing::ElementsAre;

TEST(GradientKernelsTest, RegistersEveryGradientKernelOnCpu) {
  KernelRegistry registry;
  absl::Status status = RegisterCpuGradientKernels(&registry);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(registry.OpTypes(plan::CPU),
              ElementsAre("broadcast_to", "causal_attention_grad", "embedding_grad", "gelu_grad",
                          "layer_norm_grad", "log_softmax_grad", "reduce_sum_to", "relu_grad",
                          "softmax_grad", "sparse_cross_entropy_grad", "tanh_grad"));
}

TEST(GradientKernelsTest, FailsWhenAlreadyRegistered) {
  KernelRegistry registry;
  ASSERT_TRUE(RegisterCpuGradientKernels(&registry).ok());
  absl::Status status = RegisterCpuGradientKernels(&registry);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
}

TEST(GradientKernelsTest, AreAmongTheCpuKernels) {
  KernelRegistry all;
  ASSERT_TRUE(RegisterCpuKernels(&all).ok());
  KernelRegistry gradients;
  ASSERT_TRUE(RegisterCpuGradientKernels(&gradients).ok());
  for (const std::string& op_type : gradients.OpTypes(plan::CPU)) {
    EXPECT_TRUE(all.Contains(op_type, plan::CPU)) << op_type;
  }
}

}  // namespace
}  // namespace loom
