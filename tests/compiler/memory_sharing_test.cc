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
#include "tests/compiler/gpt_layouts.h"
#include "tests/compiler/run_util.h"

namespace loom::compiler::testing {
namespace {

struct Outcome {
  MeasuredRun run;
  int64_t register_bytes = 0;  // over the devices, estimated
  int pools = 0;
};

absl::StatusOr<Outcome> CompileAndRunWith(const GptLayout& layout, job::RegisterMemory memory) {
  absl::StatusOr<CompileResult> compiled = CompileGpt(layout, memory);
  if (!compiled.ok()) return compiled.status();
  Outcome result;
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(compiled->node_plans)) {
    result.register_bytes += estimate.register_bytes;
  }
  result.pools = compiled->plan.memory_pools_size();
  absl::StatusOr<MeasuredRun> run = RunMeasured(*compiled);
  if (!run.ok()) return run.status();
  result.run = std::move(*run);
  return result;
}

class MemorySharingTest : public ::testing::TestWithParam<GptLayout> {};

TEST_P(MemorySharingTest, TrainsBitForBitAsApartWithinTheEstimate) {
  const GptLayout& layout = GetParam();
  absl::StatusOr<Outcome> apart = CompileAndRunWith(layout, job::REGISTER_MEMORY_SEPARATE);
  ASSERT_TRUE(apart.ok()) << apart.status();
  absl::StatusOr<Outcome> shared = CompileAndRunWith(layout, job::REGISTER_MEMORY_SHARED);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(apart->pools, 0);
  EXPECT_GT(shared->pools, 0) << "no register shares memory";
  EXPECT_LT(shared->register_bytes, apart->register_bytes);
  ExpectBitIdentical(apart->run.fetched, shared->run.fetched, layout.name);
  // The runtime allocated what the compiler estimated, device by device, to the byte.
  EXPECT_EQ(shared->run.allocated_bytes, shared->run.estimated_bytes);
  EXPECT_EQ(apart->run.allocated_bytes, apart->run.estimated_bytes);
}

INSTANTIATE_TEST_SUITE_P(Layouts, MemorySharingTest, ::testing::ValuesIn(OneNodeSharingLayouts()),
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
      EXPECT_GT(parts.communication + parts.pooled_communication, 0) << what;
    }
    EXPECT_EQ(parts.pools > 0,
              parts.pooled_activations + parts.pooled_gradients + parts.pooled_communication > 0)
        << what;
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
