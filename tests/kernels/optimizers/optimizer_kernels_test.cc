#include "kernels/cpu/optimizers/optimizer_kernels.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_registry.h"

namespace loom {
namespace {

using ::testing::ElementsAre;

TEST(OptimizerKernelsTest, RegistersOptimizerOps) {
  KernelRegistry registry;
  ASSERT_TRUE(RegisterCpuOptimizerKernels(&registry).ok());
  EXPECT_THAT(registry.OpTypes(plan::CPU),
              ElementsAre("adamw", "clip_coefficient", "scale_by", "sgd", "squared_norm"));
}

TEST(OptimizerKernelsTest, AreAmongTheCpuKernels) {
  KernelRegistry registry;
  ASSERT_TRUE(RegisterCpuKernels(&registry).ok());
  for (const char* op_type : {"sgd", "adamw", "squared_norm", "clip_coefficient", "scale_by"}) {
    EXPECT_TRUE(registry.Contains(op_type, plan::CPU)) << op_type;
  }
  EXPECT_TRUE(registry.Contains("matmul", plan::CPU));
}

TEST(OptimizerKernelsTest, RegisteringTwiceFails) {
  KernelRegistry registry;
  ASSERT_TRUE(RegisterCpuOptimizerKernels(&registry).ok());
  absl::Status status = RegisterCpuOptimizerKernels(&registry);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(status.message(), "a kernel for op 'sgd' on cpu is already registered");
}

}  // namespace
}  // namespace loom
