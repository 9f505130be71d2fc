// Every validation error names the op (or variable, input, tensor) and the problem.
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
              "device node0/cpu:0 needs 32.0 KiB for its registers but its budget is 4.0 KiB; "
              "largest registers: 'y@0' (16.0 KiB), 'x@0' (16.0 KiB)",
              absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace loom::compiler::testing
