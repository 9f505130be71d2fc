// Every validation error names the op (or variable, input, tensor) and the problem.
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "compiler/memory_plan.h"
#include "core/device_name.h"
#include "core/format_bytes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/test_jobs.h"

namespace loom::compiler::testing {
namespace {

using ::testing::HasSubstr;

void ExpectError(const std::string& text, const std::string& message,
                 absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  job::Job job = ParseJob(text);
  auto result = CompileOn(job, 2);
  ASSERT_FALSE(result.ok()) << "compiled a bad job; expected: " << message;
  EXPECT_EQ(result.status().code(), code) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr(message));
}

std::string Base() {
  return R"pb(name: "bad"
              placement { devices: [ "cpu:0", "cpu:1" ] }
              inputs {
                name: "x"
                shape: [ 4, 6 ]
                random_normal { std: 1 seed: 1 }
              }
              variables {
                name: "w"
                shape: [ 6, 3 ]
                initializer { normal { std: 1 seed: 2 } }
              }
  )pb";
}

TEST(CompilerValidationTest, APlanOverTheTaskLimitIsRefusedNamingWhereItCrossedIt) {
  // A chain of 40 relus on 2 devices: 2 tasks per op, and the source's, the fetch's.
  std::string text = R"pb(name: "long_chain"
                          placement { devices: [ "cpu:0", "cpu:1" ] }
                          inputs {
                            name: "r0"
                            shape: [ 4, 6 ]
                            random_normal { std: 1 seed: 1 }
                          }
                          fetch: "r40")pb";
  for (int i = 1; i <= 40; ++i) {
    absl::StrAppend(&text, " ops { name: \"relu", i, "\" type: \"relu\" inputs: \"r", i - 1,
                    "\" outputs: \"r", i, "\" }");
  }
  const job::Job job = ParseJob(text);
  const DeviceSet devices = DeviceSet::Cpus(2, 1);
  absl::StatusOr<CompileResult> unlimited = Compile(job, StandardOps(), devices);
  ASSERT_TRUE(unlimited.ok()) << unlimited.status();
  const int tasks = unlimited->plan.tasks_size();
  ASSERT_GT(tasks, 80);
  EXPECT_TRUE(Compile(job, StandardOps(), devices, CompileOptions{.max_tasks = tasks}).ok());
  absl::StatusOr<CompileResult> refused =
      Compile(job, StandardOps(), devices, CompileOptions{.max_tasks = 50});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("job 'long_chain' lowers to more than 50 tasks"));
  // The source's 2 tasks, then 2 per relu: the 25th takes the plan to 52.
  EXPECT_THAT(refused.status().message(), HasSubstr("52 after 'relu25'"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--max-plan-tasks"));
}

TEST(CompilerValidationTest, UnknownOp) {
  ExpectError(Base() + R"pb(ops { name: "boom" type: "explode" inputs: "x" outputs: "y" })pb",
              "op 'boom': unknown op type 'explode'");
}

TEST(CompilerValidationTest, DanglingTensor) {
  ExpectError(Base() + R"pb(ops {
                              name: "mm"
                              type: "matmul"
                              inputs: [ "x", "ghost" ]
                              outputs: "y"
                            })pb",
              "op 'mm' reads tensor 'ghost', which no variable, input or op produces");
}

TEST(CompilerValidationTest, DoublyProducedTensor) {
  ExpectError(Base() + R"pb(ops { name: "a" type: "relu" inputs: "x" outputs: "y" }
                            ops { name: "b" type: "relu" inputs: "x" outputs: "y" })pb",
              "tensor 'y' is produced by both op 'a' and op 'b'");
}

TEST(CompilerValidationTest, Cycle) {
  ExpectError(Base() + R"pb(ops {
                              name: "a"
                              type: "add"
                              inputs: [ "x", "q" ]
                              outputs: "p"
                            }
                            ops { name: "b" type: "relu" inputs: "p" outputs: "q" })pb",
              "ops form a cycle (each waits for another's output): 'a', 'b'");
}

TEST(CompilerValidationTest, ShapeMismatch) {
  ExpectError(Base() + R"pb(ops {
                              name: "mm"
                              type: "matmul"
                              inputs: [ "w", "x" ]
                              outputs: "y"
                            })pb",
              "op 'mm' (matmul): inner dimensions differ");
}

TEST(CompilerValidationTest, SplitAxisOutOfRangeInAHint) {
  ExpectError(Base() + R"pb(ops {
                              name: "r"
                              type: "relu"
                              inputs: "x"
                              outputs: "y"
                              output_sbp { sbp: "S(3)" }
                            })pb",
              "op 'r' (relu): SBP hint for output 'y': S(3) is out of range for the 2-D tensor");
}

TEST(CompilerValidationTest, SplitThatDoesNotDivideWhereTheOpNeedsIt) {
  // Reshaping [4, 6] into [4, 3, 2] keeps axis 1's split only if 3 divides by the 2 devices.
  ExpectError(Base() + R"pb(ops {
                              name: "rs"
                              type: "reshape"
                              inputs: "x"
                              outputs: "y"
                              attributes {
                                key: "shape"
                                value { int_list { values: [ 4, 3, 2 ] } }
                              }
                              output_sbp { sbp: "S(1)" }
                            })pb",
              "op 'rs' (reshape): no SBP signature");
}

TEST(CompilerValidationTest, PlacementNamingAMissingDevice) {
  ExpectError(Base() + R"pb(ops {
                              name: "r"
                              type: "relu"
                              inputs: "x"
                              outputs: "y"
                              placement { devices: [ "cpu:0", "cpu:9" ] }
                            })pb",
              "op 'r': placement names device node0/cpu:9, which does not exist");
}

TEST(CompilerValidationTest, HierarchyThatDoesNotMatchTheDevices) {
  ExpectError(Base() + R"pb(ops {
                              name: "r"
                              type: "relu"
                              inputs: "x"
                              outputs: "y"
                              placement {
                                devices: [ "cpu:0", "cpu:1" ]
                                hierarchy: [ 2, 2 ]
                              }
                            })pb",
              "op 'r': the placement's hierarchy [2, 2] has 4 positions but the placement lists 2");
}

TEST(CompilerValidationTest, UnparseableSbp) {
  ExpectError(R"pb(name: "bad"
                   inputs {
                     name: "x"
                     shape: [ 4 ]
                     sbp: "Split0"
                     random_normal { std: 1 }
                   })pb",
              "input 'x': cannot parse SBP 'Split0'");
}

TEST(CompilerValidationTest, VariableWithoutInitializer) {
  ExpectError(R"pb(name: "bad"
                   variables {
                     name: "w"
                     shape: [ 4 ]
                   })pb",
              "variable 'w' has no initializer");
}

TEST(CompilerValidationTest, StageWithoutPlacement) {
  ExpectError(Base() + R"pb(ops { name: "r" type: "relu" inputs: "x" outputs: "y" stage: 1 })pb",
              "op 'r': stage 1 has no placement");
}

TEST(CompilerValidationTest, FetchOfAnUnknownTensor) {
  ExpectError(Base() + R"pb(fetch: "nothing")pb", "fetch names tensor 'nothing'");
}

TEST(CompilerValidationTest, SummedFetches) {
  const std::string job =
      Base() + R"pb(ops { name: "m" type: "reduce_mean" inputs: "x" outputs: "mean" }
                    ops { name: "r" type: "relu" inputs: "x" outputs: "r" }
  )pb";
  ExpectError(job + R"pb(fetch: "r" summed_fetches: "mean")pb",
              "summed_fetches names 'mean', which the job does not fetch");
  ExpectError(job + R"pb(summed_fetches: "nothing")pb",
              "summed_fetches names 'nothing', which the job does not fetch");
  ExpectError(job + R"pb(fetch: "r" summed_fetches: "r")pb",
              "summed_fetches names 'r', which is [4, 6], not one element");
  ExpectError(job + R"pb(loss: "mean" fetch: "mean" summed_fetches: "mean")pb",
              "summed_fetches names 'mean', the loss");

  // The plan marks the summed fetch, and only it.
  auto result = CompileOn(ParseJob(job + R"pb(fetch: [ "mean", "r" ]
                                              summed_fetches: "mean")pb"),
                          2);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->plan.fetches_size(), 2);
  for (const plan::Fetch& fetch : result->plan.fetches()) {
    EXPECT_EQ(fetch.summed_over_step(), fetch.tensor() == "mean") << fetch.tensor();
  }
}

TEST(CompilerValidationTest, OverBudgetPlanNamesTheDeviceAndItsLargestRegisters) {
  ExpectError(R"pb(name: "big"
                   placement { devices: [ "cpu:0", "cpu:1" ] }
                   device_memory_budget_bytes: 4096
                   inputs {
                     name: "x"
                     shape: [ 64, 64 ]
                     sbp: "S(0)"
                     random_normal { std: 1 }
                   }
                   ops { name: "r" type: "relu" inputs: "x" outputs: "y" })pb",
              "device node0/cpu:0 needs 16.0 KiB for its registers but its budget is 4.0 KiB; "
              "largest registers: 'y@0' (8.0 KiB), 'x@0' (8.0 KiB)",
              absl::StatusCode::kResourceExhausted);
}

TEST(CompilerValidationTest, TheEstimateCountsTheHugePagesOfLargeHostRegisters) {
  // 512 x 512 float32 split over two devices: 512 KiB slots, small pages. 1024 x 512: 1 MiB slots,
  // each on a 2 MiB huge page (core/host_buffer_layout.h), as the runtime will allocate them:
  // within the budget by their bytes, over it by their pages.
  const std::string job = R"pb(name: "big"
                               placement { devices: [ "cpu:0", "cpu:1" ] }
                               device_memory_budget_bytes: 3145728
                               inputs {
                                 name: "x"
                                 shape: [ ROWS, 512 ]
                                 sbp: "S(0)"
                                 random_normal { std: 1 }
                               }
                               ops { name: "r" type: "relu" inputs: "x" outputs: "y" })pb";
  absl::StatusOr<CompileResult> small = Compile(
      ParseJob(absl::StrReplaceAll(job, {{"ROWS", "512"}})), StandardOps(), DeviceSet::Cpus(2, 1));
  ASSERT_TRUE(small.ok()) << small.status();
  std::vector<DeviceMemoryEstimate> estimates = EstimateMemory(small->node_plans);
  ASSERT_EQ(estimates.size(), 2u);
  EXPECT_EQ(estimates[0].register_bytes, 2 * (512 << 10));  // x@0 and y@0, one slot each

  absl::StatusOr<CompileResult> large = Compile(
      ParseJob(absl::StrReplaceAll(job, {{"ROWS", "1024"}})), StandardOps(), DeviceSet::Cpus(2, 1));
  ASSERT_FALSE(large.ok());
  EXPECT_EQ(large.status().code(), absl::StatusCode::kResourceExhausted) << large.status();
  EXPECT_THAT(large.status().message(),
              HasSubstr("device node0/cpu:0 needs 4.0 MiB for its registers but its budget is "
                        "3.0 MiB; largest registers: 'y@0' (2.0 MiB), 'x@0' (2.0 MiB)"));
}

TEST(CompilerValidationTest, TheEstimateCountsTheStagingOfCollectivesAcrossNodes) {
  // x [512, 512] float32 S(1) goes to S(0) for the relu: an all-to-all split along axis 0 and
  // concatenated along axis 1, so each rank receives its peer's 256 x 256 block (256 KiB) into a
  // staging buffer when the ranks are on two nodes (network collectives); on one node the
  // shared-memory backend stages nothing.
  const std::string job = R"pb(name: "exchange"
                               placement { devices: [ "cpu:0", "DEVICE" ] }
                               inputs {
                                 name: "x"
                                 shape: [ 512, 512 ]
                                 sbp: "S(1)"
                                 random_normal { std: 1 }
                               }
                               ops {
                                 name: "r"
                                 type: "relu"
                                 inputs: "x"
                                 outputs: "y"
                                 output_sbp { sbp: "S(0)" }
                               })pb";
  auto compile = [&](const std::string& device, int nodes, int64_t budget) {
    job::Job parsed = ParseJob(absl::StrReplaceAll(job, {{"DEVICE", device}}));
    parsed.set_device_memory_budget_bytes(budget);
    return Compile(parsed, StandardOps(), DeviceSet::Cpus(2, nodes));
  };
  absl::StatusOr<CompileResult> one_node = compile("cpu:1", 1, 0);
  ASSERT_TRUE(one_node.ok()) << one_node.status();
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(one_node->node_plans)) {
    EXPECT_EQ(estimate.staging_bytes, 0) << DeviceName(estimate.device);
  }

  absl::StatusOr<CompileResult> two_nodes = compile("node1/cpu:0", 2, 0);
  ASSERT_TRUE(two_nodes.ok()) << two_nodes.status();
  const std::vector<DeviceMemoryEstimate> estimates = EstimateMemory(two_nodes->node_plans);
  ASSERT_EQ(estimates.size(), 2u);
  for (const DeviceMemoryEstimate& estimate : estimates) {
    EXPECT_EQ(estimate.staging_bytes, 256 << 10) << DeviceName(estimate.device);
    EXPECT_EQ(estimate.register_bytes, estimates[0].register_bytes);
  }
  EXPECT_THAT(Explain(*two_nodes), HasSubstr("256.0 KiB of collective staging"));

  // A budget that holds the registers but not the staging fails at compile time, naming both.
  const int64_t needed = estimates[0].total_bytes();
  ASSERT_TRUE(compile("node1/cpu:0", 2, needed).ok());
  absl::StatusOr<CompileResult> tight = compile("node1/cpu:0", 2, needed - 1);
  ASSERT_FALSE(tight.ok());
  EXPECT_EQ(tight.status().code(), absl::StatusCode::kResourceExhausted) << tight.status();
  EXPECT_THAT(tight.status().message(),
              HasSubstr(absl::StrCat("device node0/cpu:0 needs ", FormatBytes(needed), " (",
                                     FormatBytes(estimates[0].register_bytes),
                                     " for its registers, 256.0 KiB for the staging buffers of "
                                     "its network collectives) but its budget is ")));
  EXPECT_THAT(tight.status().message(), HasSubstr("; most staging: communicator '"));
}

TEST(CompilerValidationTest, EachDeviceGetsTheTighterOfTheJobsBudgetAndItsOwn) {
  job::Job job = ParseJob(R"pb(name: "big"
                               placement { devices: [ "cpu:0", "node1/cpu:0" ] }
                               device_memory_budget_bytes: 65536
                               inputs {
                                 name: "x"
                                 shape: [ 64, 64 ]
                                 sbp: "S(0)"
                                 random_normal { std: 1 }
                               }
                               ops { name: "r" type: "relu" inputs: "x" outputs: "y" })pb");
  DeviceSet devices = DeviceSet::Cpus(2, 2);
  devices.memory_budget_bytes = {0, 1 << 20};  // node 0: none of its own; node 1: 1 MiB
  absl::StatusOr<CompileResult> result = Compile(job, StandardOps(), devices);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->plan.devices_size(), 2);
  EXPECT_EQ(result->plan.devices(0).memory_budget_bytes(), 65536);  // the job's
  EXPECT_EQ(result->plan.devices(1).memory_budget_bytes(), 65536);  // the job's is tighter

  devices.memory_budget_bytes = {0, 4096};  // node 1's own budget is tighter than the job's
  result = Compile(job, StandardOps(), devices);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted) << result.status();
  EXPECT_THAT(result.status().message(),
              HasSubstr("device node1/cpu:0 needs 16.0 KiB for its registers but its budget is "
                        "4.0 KiB"));

  job.clear_device_memory_budget_bytes();  // the device's own budget alone
  devices.memory_budget_bytes = {0, 1 << 20};
  result = Compile(job, StandardOps(), devices);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->plan.devices(0).memory_budget_bytes(), 0);
  EXPECT_EQ(result->plan.devices(1).memory_budget_bytes(), 1 << 20);
  ASSERT_EQ(result->node_plans.size(), 2u);
  EXPECT_EQ(result->node_plans[1].devices(0).memory_budget_bytes(), 1 << 20);
}

// --- Training jobs ----------------------------------------------------------------------------

TEST(CompilerValidationTest, StageThatSkipsAStage) {
  ExpectError(
      Base() + R"pb(stage_placements { devices: "cpu:0" }
                    stage_placements { devices: "cpu:1" }
                    stage_placements { devices: "cpu:1" }
                    ops { name: "first" type: "relu" inputs: "x" outputs: "a" stage: 0 }
                    ops { name: "third" type: "relu" inputs: "a" outputs: "b" stage: 2 })pb",
      "op 'third' is on stage 2, but no op is on stage 1");
}

TEST(CompilerValidationTest, ForwardOpFeedingAnEarlierStage) {
  ExpectError(
      Base() + R"pb(stage_placements { devices: "cpu:0" }
                    stage_placements { devices: "cpu:1" }
                    ops { name: "late" type: "relu" inputs: "x" outputs: "a" stage: 1 }
                    ops { name: "early" type: "relu" inputs: "a" outputs: "b" stage: 0 })pb",
      "op 'early' on stage 0 reads 'a' from stage 1");
}

TEST(CompilerValidationTest, MicroBatchesThatDoNotDivideTheBatch) {
  ExpectError(Base() + R"pb(num_micro_batches: 3
                            ops { name: "a" type: "relu" inputs: "x" outputs: "b" })pb",
              "input 'x': num_micro_batches 3 does not divide its batch (axis 0 of [4, 6])");
}

TEST(CompilerValidationTest, MicroBatchesThatDoNotDivideARanksShare) {
  // 6 samples over 2 ranks and 2 micro-batches: a micro-batch of 3 does not split evenly.
  ExpectError(R"pb(name: "bad"
                   placement { devices: [ "cpu:0", "cpu:1" ] }
                   num_micro_batches: 2
                   inputs {
                     name: "x"
                     shape: [ 6, 2 ]
                     random_normal { std: 1 seed: 1 }
                   }
                   ops { name: "a" type: "relu" inputs: "x" outputs: "b" })pb",
              "input 'x': rank 0 reads 3 samples per step, which num_micro_batches 2 does not "
              "divide");
}

TEST(CompilerValidationTest, ClippingWithoutALoss) {
  ExpectError(Base() + R"pb(max_grad_norm: 1
                            ops { name: "a" type: "relu" inputs: "x" outputs: "b" })pb",
              "max_grad_norm is set, but the job has no loss");
}

TEST(CompilerValidationTest, TokenFileInputs) {
  const std::string base = R"pb(name: "bad"
                                placement { devices: [ "cpu:0", "cpu:1" ] })pb";
  ExpectError(base + R"pb(inputs {
                            name: "tokens"
                            shape: [ 4, 8 ]
                            token_file { path: "/usr/share/common-licenses/GPL-3" }
                          })pb",
              "input 'tokens': token ids need data_type INT32 or INT64");
  ExpectError(base + R"pb(inputs {
                            name: "tokens"
                            shape: [ 4, 8, 2 ]
                            data_type: INT32
                            token_file { path: "/usr/share/common-licenses/GPL-3" }
                          })pb",
              "input 'tokens': a token input is [batch, sequence], not rank 3");
  ExpectError(
      base + R"pb(inputs {
                    name: "tokens"
                    shape: [ 4, 8 ]
                    data_type: INT32
                    token_file { path: "x" format: "utf8" }
                  })pb",
      "input 'tokens': token_file format 'utf8' is not \"bytes\", \"uint16\" or \"uint32\"");
}

TEST(CompilerValidationTest, TokenDatasetInputs) {
  const std::string base = R"pb(name: "bad"
                                placement { devices: [ "cpu:0", "cpu:1" ] })pb";
  auto input = [&](const std::string& dataset) {
    return base + R"pb(inputs { name: "tokens"
                                shape: [ 4, 8 ]
                                data_type: INT32
                                token_dataset {)pb" +
           dataset + "} }";
  };
  ExpectError(input(""), "input 'tokens': token_dataset has no source");
  ExpectError(input("sources {}"), "input 'tokens': token_dataset source 0 has no path");
  ExpectError(input(R"pb(sources { paths: "/d" }
                         sources { paths: "" })pb"),
              "input 'tokens': token_dataset source 1 has an empty path");
  ExpectError(input(R"pb(sources { paths: "/d" format: "utf8" })pb"),
              "input 'tokens': token_dataset source 0: format 'utf8' is not \"bytes\", "
              "\"uint16\" or \"uint32\"");
  ExpectError(input(R"pb(sources { paths: "/d" weight: -1 })pb"),
              "input 'tokens': token_dataset source 0: weight -1 is not a finite number > 0 "
              "(0 means 1)");
  ExpectError(input(R"pb(sources { paths: "/d" }
                         end_of_text: -2)pb"),
              "input 'tokens': token_dataset end_of_text -2 is negative");
}

TEST(CompilerValidationTest, ClippingAndSleepOps) {
  ExpectError(
      Base() +
          R"pb(ops { name: "norm" type: "squared_norm" inputs: "x" outputs: "n" }
               ops { name: "coefficient" type: "clip_coefficient" inputs: "n" outputs: "c" })pb",
      "op 'coefficient' (clip_coefficient): attribute 'max_norm' must be positive");
  ExpectError(Base() + R"pb(ops {
                              name: "scaled"
                              type: "scale_by"
                              inputs: [ "x", "x" ]
                              outputs: "y"
                            })pb",
              "op 'scaled' (scale_by): the coefficient must be float32[1], not float32[4, 6]");
  ExpectError(Base() + R"pb(ops { name: "nap" type: "sleep" inputs: "x" outputs: "y" })pb",
              "op 'nap' (sleep): attribute 'microseconds' is required");
  ExpectError(Base() + R"pb(ops {
                              name: "nap"
                              type: "sleep"
                              inputs: "x"
                              outputs: "y"
                              attributes {
                                key: "milliseconds"
                                value { int_value: 1 }
                              }
                            })pb",
              "op 'nap' (sleep): unknown attribute 'milliseconds'");
}

TEST(CompilerValidationTest, EmptyJobAndOverflowingShapes) {
  ExpectError(R"pb(name: "nothing")pb", "job 'nothing' has nothing to run");
  ExpectError(R"pb(name: "huge"
                   inputs {
                     name: "x"
                     shape: [ 4611686018427387904, 4 ]
                     random_normal { std: 1 seed: 1 }
                   })pb",
              "input 'x': shape [4611686018427387904, 4] has more than");
}

// Issue 56, finding 2: sizes that overflow int64 (or pass the limits of core/tensor.h) are
// refused naming the op or placement, before a register is sized from them.
TEST(CompilerValidationTest, ReshapeWhoseElementCountWrapsIsRefused) {
  // 24 * 768614336404564651 is 8 modulo 2^64: the register would have been 32 bytes.
  ExpectError(R"pb(name: "wrap"
                   placement { devices: "cpu:0" }
                   inputs {
                     name: "x"
                     shape: [ 8 ]
                     random_normal { std: 1 seed: 1 }
                   }
                   ops {
                     name: "rs"
                     type: "reshape"
                     inputs: "x"
                     outputs: "y"
                     attributes {
                       key: "shape"
                       value { int_list { values: [ 24, 768614336404564651 ] } }
                     }
                   }
                   fetch: "y")pb",
              "op 'rs' (reshape): shape [24, 768614336404564651] has more than 2^48");
}

TEST(CompilerValidationTest, BroadcastWhoseOutputIsBeyondTheLimitIsRefused) {
  // Inputs of 2^31 elements each; the sum is [2^31, 2^31], 2^62 elements (2^64 bytes).
  ExpectError(R"pb(name: "outer"
                   placement { devices: "cpu:0" }
                   inputs {
                     name: "a"
                     shape: [ 2147483648, 1 ]
                     random_normal { std: 1 seed: 1 }
                   }
                   inputs {
                     name: "b"
                     shape: [ 1, 2147483648 ]
                     random_normal { std: 1 seed: 2 }
                   }
                   ops {
                     name: "sum"
                     type: "add"
                     inputs: [ "a", "b" ]
                     outputs: "z"
                   }
                   fetch: "z")pb",
              "op 'sum' (add): output 'z' shape [2147483648, 2147483648] has more than 2^48");
}

TEST(CompilerValidationTest, HierarchyWhoseProductWrapsIsRefused) {
  // 7 * 7905747460161236407 is 1 modulo 2^64, the number of devices listed.
  ExpectError(Base() + R"pb(ops {
                              name: "r"
                              type: "relu"
                              inputs: "x"
                              outputs: "y"
                              placement {
                                devices: [ "cpu:0" ]
                                hierarchy: [ 7, 7905747460161236407 ]
                              }
                            })pb",
              "op 'r': the placement's hierarchy [7, 7905747460161236407] has more positions "
              "than fit in 64 bits but the placement lists 1 devices");
}

TEST(CompilerValidationTest, PadWhoseBeginOverflowsIsRefused) {
  // begin + x's extent wraps to a negative number, which passed `<= shape` before.
  ExpectError(Base() + R"pb(ops {
                              name: "p"
                              type: "pad"
                              inputs: "x"
                              outputs: "y"
                              attributes {
                                key: "shape"
                                value { int_list { values: [ 4, 6 ] } }
                              }
                              attributes {
                                key: "begin"
                                value { int_list { values: [ 9223372036854775807, 0 ] } }
                              }
                            })pb",
              "op 'p' (pad): x float32[4, 6] at begin [9223372036854775807, 0] does not lie");
}

TEST(CompilerValidationTest, AttentionWhoseScoresAreBeyondTheLimitIsRefused) {
  // q of 2^25 tokens: 2^25 elements, but its scores [1, 1, 2^25, 2^25] are 2^50.
  ExpectError(R"pb(name: "long"
                   placement { devices: "cpu:0" }
                   inputs {
                     name: "q"
                     shape: [ 1, 1, 33554432, 1 ]
                     random_normal { std: 1 seed: 1 }
                   }
                   ops {
                     name: "att"
                     type: "causal_attention"
                     inputs: [ "q", "q", "q" ]
                     outputs: "y"
                   }
                   fetch: "y")pb",
              "op 'att' (causal_attention): the attention scores of q [1, 1, 33554432, 1]");
}

TEST(CompilerValidationTest, ConcatBeyondTheLimitIsRefused) {
  std::string text = R"pb(name: "long_concat"
                          placement { devices: "cpu:0" }
                          ops {
                            name: "c"
                            type: "concat"
                            inputs: [ "a", "b", "d" ]
                            outputs: "y"
                            attributes {
                              key: "axis"
                              value { int_value: 0 }
                            }
                          }
                          fetch: "y")pb";
  for (const char* name : {"a", "b", "d"}) {
    absl::StrAppend(&text, " inputs { name: \"", name,
                    "\" shape: [ 140737488355328 ] random_normal { std: 1 } }");
  }
  ExpectError(text, "op 'c' (concat): the concatenation axis 0 of its 3 inputs has more than 2^48");
}

// A one-device plan: one register of `elements` bytes in `num_slots` slots.
plan::Plan PlanOfOneRegister(int64_t elements, int num_slots, int64_t budget_bytes) {
  plan::Plan plan;
  plan::DeviceDesc* device = plan.add_devices();
  device->mutable_device()->set_type(plan::CPU);
  device->set_memory_budget_bytes(budget_bytes);
  plan::RegisterDesc* reg = plan.add_registers();
  reg->set_name("r");
  reg->mutable_tensor()->add_shape(elements);
  reg->mutable_tensor()->set_data_type(plan::UINT8);
  reg->set_num_slots(num_slots);
  plan::Task* task = plan.add_tasks();
  task->set_name("t");
  task->set_kind(plan::COMPUTE);
  *task->mutable_stream()->mutable_device() = device->device();
  task->add_outputs("r");
  return plan;
}

TEST(CompilerValidationTest, MemoryEstimateSaturatesInsteadOfWrapping) {
  const plan::Plan plan = PlanOfOneRegister(int64_t{1} << 48, 1 << 16, int64_t{1} << 30);
  const std::vector<DeviceMemoryEstimate> estimates = EstimateMemory({plan});
  ASSERT_EQ(estimates.size(), 1u);
  EXPECT_EQ(estimates[0].register_bytes, std::numeric_limits<int64_t>::max());
  absl::Status status = CheckMemory({plan});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("device node0/cpu:0 needs"));
}

TEST(CompilerValidationTest, MemoryBeyondAnyDeviceIsRefusedWithoutABudget) {
  // 2^7 slots of 2^48 bytes pass; 257 slots, just over 2^56 bytes, fit in int64 but no device
  // holds them.
  EXPECT_TRUE(CheckMemory({PlanOfOneRegister(int64_t{1} << 48, 1 << 7, 0)}).ok());
  absl::Status status = CheckMemory({PlanOfOneRegister(int64_t{1} << 48, (1 << 8) + 1, 0)});
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("more than the 2^56 bytes (64 PiB)"));
}

}  // namespace
}  // namespace loom::compiler::testing
