#include "cli/device_spec.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::loomctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

cli::GpuCounter Gpus(int count) {
  return [count]() -> absl::StatusOr<int> { return count; };
}

cli::GpuCounter NoGpu() {
  return []() -> absl::StatusOr<int> { return absl::FailedPreconditionError("no CUDA driver"); };
}

TEST(DeviceSpecTest, CpuCountsDevicesFromZero) {
  absl::StatusOr<cli::DeviceSpec> spec = cli::ParseDeviceSpec("loomctl x", "cpu:3", NoGpu());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->type, plan::CPU);
  EXPECT_THAT(spec->indices, ElementsAre(0, 1, 2));
  EXPECT_EQ(spec->ToString(), "cpu:3");
}

TEST(DeviceSpecTest, CudaListsIndicesInOrder) {
  absl::StatusOr<cli::DeviceSpec> spec = cli::ParseDeviceSpec("loomctl x", "cuda:3,1", NoGpu());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->type, plan::CUDA);
  EXPECT_THAT(spec->indices, ElementsAre(1, 3));
  EXPECT_EQ(spec->ToString(), "cuda:1,3");
}

TEST(DeviceSpecTest, CudaAllAsksHowManyGpusThereAre) {
  absl::StatusOr<cli::DeviceSpec> spec = cli::ParseDeviceSpec("loomd", "cuda:all", Gpus(2));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->indices, ElementsAre(0, 1));

  absl::StatusOr<cli::DeviceSpec> none = cli::ParseDeviceSpec("loomd", "cuda:all", NoGpu());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(), HasSubstr("loomd: --devices cuda:all: no CUDA driver"));

  absl::StatusOr<cli::DeviceSpec> zero = cli::ParseDeviceSpec("loomd", "cuda:all", Gpus(0));
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.status().message(), HasSubstr("no GPU"));
}

TEST(DeviceSpecTest, MalformedValuesAreNamed) {
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"", "unknown device type"},
           {"gpu:1", "unknown device type"},
           {"cpu:0", "N >= 1"},
           {"cpu:-1", "N >= 1"},
           {"cpu:two", "N >= 1"},
           {"cuda:", "'' is not a GPU index"},
           {"cuda:0,,1", "'' is not a GPU index"},
           {"cuda:-1", "'-1' is not a GPU index"},
           {"cuda:0,0", "cuda:0 is named twice"},
       }) {
    absl::StatusOr<cli::DeviceSpec> spec = cli::ParseDeviceSpec("loomctl x", text, Gpus(4));
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(spec.status().message(), HasSubstr("--devices '" + text + "'")) << text;
    EXPECT_THAT(spec.status().message(), HasSubstr(message)) << text;
  }
}

TEST(DeviceSpecTest, SpreadGivesEveryNodeTheSameDeviceNames) {
  compiler::DeviceSet set = cli::DeviceSpec{plan::CUDA, {0, 1, 2, 3}}.Spread(2);
  ASSERT_EQ(set.devices.size(), 4u);
  EXPECT_EQ(set.ToString(), "node0/cuda:0, node0/cuda:1, node1/cuda:0, node1/cuda:1");
  EXPECT_EQ(cli::DeviceSpec({plan::CPU, {0, 1, 2}}).Spread(1).ToString(),
            compiler::DeviceSet::Cpus(3, 1).ToString());
  EXPECT_EQ(cli::DeviceSpec({plan::CPU, {0, 1, 2, 3, 4}}).Spread(2).ToString(),
            compiler::DeviceSet::Cpus(5, 2).ToString());
}

}  // namespace
}  // namespace loom::loomctl
