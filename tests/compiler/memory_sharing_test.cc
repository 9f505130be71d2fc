// Registers that share memory (compiler/memory_sharing.h): a GPT trained on every layout computes
// bit for bit what it computes with every register apart, every device allocates exactly what
// the compiler estimated, and a step's transients take much less memory than apart.

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/compiler.h"
#include "compiler/memory_plan.h"
#include "core/device_name.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "node/local_run.h"
#include "tests/compiler/gpt_layouts.h"

namespace loom::compiler::testing {
namespace {

struct Outcome {
  std::map<std::string, std::vector<HostTensor>> fetched;
  std::map<std::string, int64_t> allocated_bytes;  // by device, what its allocations took
  std::map<std::string, int64_t> estimated_bytes;  // by device, EstimateMemory's total
  int64_t register_bytes = 0;                      // over the devices, estimated
  int pools = 0;
};

absl::StatusOr<Outcome> CompileAndRunWith(const GptLayout& layout, job::RegisterMemory memory) {
  absl::StatusOr<CompileResult> compiled = CompileGpt(layout, memory);
  if (!compiled.ok()) return compiled.status();
  Outcome result;
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(compiled->node_plans)) {
    result.estimated_bytes[DeviceName(estimate.device)] = estimate.total_bytes();
    result.register_bytes += estimate.register_bytes;
  }
  result.pools = compiled->plan.memory_pools_size();
  KernelRegistry kernels;
  if (absl::Status status = RegisterCpuKernels(&kernels); !status.ok()) return status;
  JobOptions options;
  options.stall_timeout = absl::Seconds(60);
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(compiled->plan, kernels, options);
  if (!run.ok()) return run.status();
  for (const auto& memory : run->runtime->device_memories()) {
    result.allocated_bytes[memory->device_name()] = memory->allocated_bytes();
  }
  result.fetched = std::move(run->fetched);
  return result;
}

void ExpectBitIdentical(const std::map<std::string, std::vector<HostTensor>>& expected,
                        const std::map<std::string, std::vector<HostTensor>>& actual,
                        const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (const auto& [name, steps] : expected) {
    auto found = actual.find(name);
    ASSERT_NE(found, actual.end()) << what << ": no fetch of '" << name << "'";
    ASSERT_EQ(steps.size(), found->second.size()) << what << ": '" << name << "'";
    for (size_t step = 0; step < steps.size(); ++step) {
      EXPECT_EQ(steps[step].bytes, found->second[step].bytes)
          << what << ": '" << name << "' differs at step " << step;
    }
  }
}

class MemorySharingTest : public ::testing::TestWithParam<GptLayout> {};

TEST_P(MemorySharingTest, TrainsBitForBitAsApartWithinTheEstimate) {
  const GptLayout& layout = GetParam();
  absl::StatusOr<Outcome> apart = CompileAndRunWith(layout, job::REGISTER_MEMORY_SEPARATE);
  ASSERT_TRUE(apart.ok()) << apart.status();
  absl::StatusOr<Outcome> shared = CompileAndRunWith(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(apart->pools, 0);
  if (layout.shares) {
    EXPECT_GT(shared->pools, 0) << "no register shares memory";
    EXPECT_LT(shared->register_bytes, apart->register_bytes);
  }
  ExpectBitIdentical(apart->fetched, shared->fetched, layout.name);
  // The runtime allocated what the compiler estimated, device by device, to the byte.
  EXPECT_EQ(shared->allocated_bytes, shared->estimated_bytes);
  EXPECT_EQ(apart->allocated_bytes, apart->estimated_bytes);
}

// The layouts of one node (the whole plan runs in this process).
std::vector<GptLayout> OneNodeLayouts() {
  std::vector<GptLayout> layouts;
  for (const GptLayout& layout : SharingLayouts()) {
    if (layout.nodes == 1) layouts.push_back(layout);
  }
  return layouts;
}

INSTANTIATE_TEST_SUITE_P(Layouts, MemorySharingTest, ::testing::ValuesIn(OneNodeLayouts()),
                         [](const ::testing::TestParamInfo<GptLayout>& info) {
                           return info.param.name;
                         });

// The estimate broken down by what the buffers hold adds up to it on every device of every
// layout; the parameters and AdamW's two states are what the variables' shapes give.
TEST_P(MemorySharingTest, EstimatesBreakDownByWhatTheBuffersHold) {
  const GptLayout& layout = GetParam();
  absl::StatusOr<CompileResult> compiled = CompileGpt(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(compiled->node_plans)) {
    const MemoryParts& parts = estimate.parts;
    const std::string what = absl::StrCat(layout.name, " ", DeviceName(estimate.device), ": ",
                                          DescribeMemoryParts(parts));
    EXPECT_EQ(parts.parameters + parts.gradients + parts.optimizer_states + parts.accumulators +
                  parts.activations + parts.communication + parts.pools,
              estimate.total_bytes())
        << what;
    EXPECT_GT(parts.parameters, 0) << what;
    EXPECT_EQ(parts.optimizer_states, 2 * parts.parameters) << what;  // AdamW
    EXPECT_EQ(parts.accumulators > 0, layout.micro_batches > 1) << what;
    if (layout.data_parallel > 1 || layout.tensor_parallel > 1) {
      EXPECT_GT(parts.communication, 0) << what;
    }
    EXPECT_EQ(parts.pools > 0, parts.pooled_activations + parts.pooled_gradients > 0) << what;
  }
}

// One device without micro-batches: the forward's activations wait for the backward, but every
// other transient of a step shares; registers take at most half of what they take apart.
TEST(MemorySharingTest, OneDeviceTrainingHalvesItsRegisters) {
  const GptLayout layout{.name = "one_device"};
  absl::StatusOr<Outcome> apart = CompileAndRunWith(layout, job::REGISTER_MEMORY_SEPARATE);
  ASSERT_TRUE(apart.ok()) << apart.status();
  absl::StatusOr<Outcome> shared = CompileAndRunWith(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_LE(shared->register_bytes * 2, apart->register_bytes)
      << shared->register_bytes << " shared against " << apart->register_bytes << " apart";
}

}  // namespace
}  // namespace loom::compiler::testing
