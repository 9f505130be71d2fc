// Jobs split over nodes, each node a NodeJob with its own UCX network in this process: the
// fetched losses equal the one-node run's bit for bit.
#include <string>

#include "absl/strings/str_cat.h"
#include "examples/gpt/gpt_model.h"
#include "gtest/gtest.h"
#include "tests/cluster/multi_node_run.h"

namespace loom::testing {
namespace {

gpt::GptConfig SmallGpt() {
  gpt::GptConfig config;
  config.context = 16;
  config.width = 32;
  config.layers = 2;
  config.heads = 2;
  config.mlp_width = 64;
  config.batch = 12;
  config.steps = 3;
  return config;
}

void ExpectBitIdentical(const Fetched& expected, const Fetched& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (const auto& [name, steps] : expected) {
    ASSERT_TRUE(actual.contains(name)) << name;
    const std::vector<HostTensor>& got = actual.at(name);
    ASSERT_EQ(steps.size(), got.size()) << name;
    for (size_t step = 0; step < steps.size(); ++step) {
      EXPECT_EQ(steps[step].shape, got[step].shape) << name << " step " << step;
      EXPECT_EQ(steps[step].bytes, got[step].bytes) << name << " step " << step;
    }
  }
}

struct Layout {
  std::string name;
  int64_t data_parallel, tensor_parallel, pipeline_stages, micro_batches;
  int nodes, devices_per_node;
};

class NodeJobTest : public ::testing::TestWithParam<Layout> {};

TEST_P(NodeJobTest, LossesEqualTheOneNodeRun) {
  const Layout& layout = GetParam();
  gpt::GptConfig config = SmallGpt();
  config.data_parallel = layout.data_parallel;
  config.tensor_parallel = layout.tensor_parallel;
  config.pipeline_stages = layout.pipeline_stages;
  config.micro_batches = layout.micro_batches;
  absl::StatusOr<job::Job> single = gpt::BuildGptJob(config);
  ASSERT_TRUE(single.ok()) << single.status();
  const int devices = layout.nodes * layout.devices_per_node;
  absl::StatusOr<Fetched> expected = RunOnOneNode(*single, devices);
  ASSERT_TRUE(expected.ok()) << expected.status();

  config.devices_per_node = layout.devices_per_node;
  absl::StatusOr<job::Job> spread = gpt::BuildGptJob(config);
  ASSERT_TRUE(spread.ok()) << spread.status();
  plan::Plan whole;
  absl::StatusOr<std::vector<plan::Plan>> plans =
      CompileForNodes(*spread, layout.nodes, layout.devices_per_node, &whole);
  ASSERT_TRUE(plans.ok()) << plans.status();
  ASSERT_EQ(plans->size(), static_cast<size_t>(layout.nodes));
  absl::StatusOr<Fetched> actual = RunNodePlans(*plans, whole);
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectBitIdentical(*expected, *actual);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, NodeJobTest,
    ::testing::Values(Layout{"pp2_on_2_nodes", 1, 1, 2, 2, 2, 1},
                      Layout{"pp2_one_micro_batch_on_2_nodes", 1, 1, 2, 1, 2, 1},
                      Layout{"dp2_pp2_stages_on_2_nodes", 2, 1, 2, 2, 2, 2},
                      Layout{"dp3_on_3_nodes", 3, 1, 1, 1, 3, 1},
                      Layout{"tp2_on_2_nodes", 1, 2, 1, 1, 2, 1},
                      Layout{"dp2_tp2_on_2_nodes", 2, 2, 1, 1, 2, 2},
                      Layout{"dp2_pp2_across_nodes", 2, 1, 2, 2, 4, 1}),
    [](const ::testing::TestParamInfo<Layout>& info) { return info.param.name; });

}  // namespace
}  // namespace loom::testing
