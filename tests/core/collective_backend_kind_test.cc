// Which backend serves a communicator (core/collective_backend_kind.h): the choice JobRuntime
// builds by and the compiler's memory estimate counts staging by.
#include "core/collective_backend_kind.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace loom::testing {
namespace {

// A communicator whose rank r is devices[r] = (node, type).
plan::Communicator MakeCommunicator(const std::vector<std::pair<int, plan::DeviceType>>& devices) {
  plan::Communicator communicator;
  communicator.set_name("comm");
  int index = 0;
  for (const auto& [node, type] : devices) {
    plan::Device* device = communicator.add_devices();
    device->set_node(node);
    device->set_type(type);
    device->set_index(index++);
  }
  return communicator;
}

TEST(CollectiveBackendKindTest, CpuRanksOfOneNodeShareMemory) {
  EXPECT_EQ(CollectiveBackendKindOf(MakeCommunicator({{0, plan::CPU}, {0, plan::CPU}})),
            CollectiveBackendKind::kSharedMemory);
  EXPECT_EQ(CollectiveBackendKindOf(MakeCommunicator({{2, plan::CPU}})),
            CollectiveBackendKind::kSharedMemory);
}

TEST(CollectiveBackendKindTest, CpuRanksOnSeveralNodesUseTheNetwork) {
  EXPECT_EQ(
      CollectiveBackendKindOf(MakeCommunicator({{0, plan::CPU}, {0, plan::CPU}, {1, plan::CPU}})),
      CollectiveBackendKind::kNetwork);
}

TEST(CollectiveBackendKindTest, GpuRanksUseNcclOnOneNodeOrSeveral) {
  EXPECT_EQ(CollectiveBackendKindOf(MakeCommunicator({{0, plan::CUDA}, {0, plan::CUDA}})),
            CollectiveBackendKind::kNccl);
  EXPECT_EQ(CollectiveBackendKindOf(MakeCommunicator({{0, plan::CUDA}, {1, plan::CUDA}})),
            CollectiveBackendKind::kNccl);
}

// Mixed ranks go to the backend that names the odd rank when it is built.
TEST(CollectiveBackendKindTest, MixedRanksAreNotNccls) {
  EXPECT_EQ(CollectiveBackendKindOf(MakeCommunicator({{0, plan::CUDA}, {0, plan::CPU}})),
            CollectiveBackendKind::kSharedMemory);
  EXPECT_EQ(CollectiveBackendKindOf(MakeCommunicator({{0, plan::CUDA}, {1, plan::CPU}})),
            CollectiveBackendKind::kNetwork);
}

}  // namespace
}  // namespace loom::testing
