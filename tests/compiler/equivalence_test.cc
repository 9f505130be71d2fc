// A plan over k devices computes what one device computes.
#include <regex>

#include "gtest/gtest.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/run_util.h"
#include "tests/compiler/test_jobs.h"

namespace loom::compiler::testing {
namespace {

void ExpectEquivalent(const std::string& one_device, const std::string& many_devices, int cpus,
                      const std::string& what) {
  auto expected = CompileAndRun(ParseJob(one_device), 1);
  ASSERT_TRUE(expected.ok()) << what << " on 1 device: " << expected.status();
  auto actual = CompileAndRun(ParseJob(many_devices), cpus);
  ASSERT_TRUE(actual.ok()) << what << " on " << cpus << " devices: " << actual.status();
  ExpectSameFetches(*expected, *actual, 1e-5, what + " on " + std::to_string(cpus) + " devices");
}

class EquivalenceTest : public ::testing::TestWithParam<int> {};

TEST_P(EquivalenceTest, DataParallelMlp) {
  ExpectEquivalent(DataParallelMlp(CpuDevices(1)), DataParallelMlp(CpuDevices(GetParam())),
                   GetParam(), "data-parallel MLP");
}

TEST_P(EquivalenceTest, MegatronMlp) {
  ExpectEquivalent(MegatronMlp(CpuDevices(1)), MegatronMlp(CpuDevices(GetParam())), GetParam(),
                   "Megatron MLP");
}

TEST_P(EquivalenceTest, TransformerBlockTensorParallel) {
  ExpectEquivalent(TransformerBlock(CpuDevices(1), true),
                   TransformerBlock(CpuDevices(GetParam()), true), GetParam(),
                   "tensor-parallel transformer block");
}

TEST_P(EquivalenceTest, TransformerBlockDataParallel) {
  ExpectEquivalent(TransformerBlock(CpuDevices(1), false),
                   TransformerBlock(CpuDevices(GetParam()), false), GetParam(),
                   "data-parallel transformer block");
}

INSTANTIATE_TEST_SUITE_P(Devices, EquivalenceTest, ::testing::Values(2, 4));

// The same job with every placement collapsed onto cpu:0 (hierarchies become all ones).
std::string OnOneDevice(const std::string& job) {
  std::string result =
      std::regex_replace(job, std::regex(R"(devices: \[[^\]]*\])"), R"(devices: ["cpu:0"])");
  return std::regex_replace(result, std::regex(R"(hierarchy: \[2, 2\])"), "hierarchy: [1, 1]");
}

TEST(EquivalenceTest, TwoDimensionalHierarchy) {
  ExpectEquivalent(OnOneDevice(TwoDimensionalMatmul()), TwoDimensionalMatmul(), 4,
                   "(S(0), S(1)) matmul on [2, 2]");
}

TEST(EquivalenceTest, TwoStages) {
  ExpectEquivalent(OnOneDevice(TwoStageMlp()), TwoStageMlp(), 4, "two-stage MLP");
}

// Stage 0 holds h split over 2 devices; stage 1 needs it whole on 3 devices: the general path
// (gather on stage 0, copies to every device of stage 1).
std::string UnevenStages() {
  return R"pb(
    name: "uneven_stages"
    placement { devices: [ "cpu:0", "cpu:1", "cpu:2", "cpu:3" ] }
    stage_placements { devices: [ "cpu:0", "cpu:1" ] }
    stage_placements { devices: [ "cpu:2", "cpu:3", "cpu:1" ] }
    num_steps: 2
    inputs {
      name: "x"
      shape: [ 7, 6 ]
      sbp: "S(0)"
      placement { devices: [ "cpu:0", "cpu:1" ] }
      random_normal { std: 1 seed: 1 }
    }
    variables {
      name: "w"
      shape: [ 6, 5 ]
      sbp: "S(1)"
      initializer { normal { std: 1 seed: 2 } }
      placement { devices: [ "cpu:2", "cpu:3", "cpu:1" ] }
    }
    ops { name: "h" type: "relu" inputs: "x" outputs: "h" stage: 0 }
    ops {
      name: "y"
      type: "matmul"
      inputs: [ "h", "w" ]
      outputs: "y"
      stage: 1
    }
    fetch: "y"
  )pb";
}

TEST(EquivalenceTest, StagesOfDifferentSizes) {
  job::Job job = ParseJob(UnevenStages());
  auto compiled = CompileOn(job, 4);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  EXPECT_EQ(Collectives(compiled->plan, plan::ALL_GATHER).size(), 2u);
  EXPECT_EQ(TasksOfKind(compiled->plan, plan::COPY).size(), 3u);
  ExpectEquivalent(OnOneDevice(UnevenStages()), UnevenStages(), 4, "stages of 2 and 3 devices");
}

}  // namespace
}  // namespace loom::compiler::testing
