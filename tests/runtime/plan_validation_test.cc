// Bad plans are rejected before any actor starts, with a message naming the culprit.
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/plan_text.h"
#include "runtime/plan_validation.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

PlanBuilder SmallChain() {
  PlanBuilder builder("chain");
  builder.AddCpuDevices(2);
  builder.AddRegister("x", {4}).AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(3);
  builder.AddTask("plus", plan::COMPUTE, 1, {"x"}, {"y"}, "test_sum_plus_one");
  builder.AddTask("sink", plan::SINK, 1, {"y"}, {});
  return builder;
}

void ExpectRejected(const plan::Plan& plan, absl::StatusCode code, const std::string& text) {
  auto job = MakeJob(plan);
  ASSERT_FALSE(job.ok()) << "accepted a bad plan; expected: " << text;
  EXPECT_EQ(job.status().code(), code) << job.status();
  EXPECT_THAT(job.status().message(), HasSubstr(text));
}

TEST(PlanValidationTest, AValidPlanPasses) { EXPECT_TRUE(ValidatePlan(SmallChain().plan()).ok()); }

TEST(PlanValidationTest, DanglingRegisterReadButNotProduced) {
  PlanBuilder builder = SmallChain();
  builder.AddRegister("orphan", {4});
  builder.AddTask("reader", plan::SINK, 0, {"orphan"}, {});
  ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                 "dangling register 'orphan': read by 'reader' but produced by no task");
}

TEST(PlanValidationTest, DanglingRegisterNeverProduced) {
  PlanBuilder builder = SmallChain();
  builder.AddRegister("forgotten", {4});
  ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                 "dangling register 'forgotten': no task produces it");
}

TEST(PlanValidationTest, UndeclaredRegister) {
  PlanBuilder builder = SmallChain();
  builder.mutable_plan().mutable_tasks(1)->set_inputs(0, "nowhere");
  ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                 "task 'plus' reads register 'nowhere', which is not declared");
}

TEST(PlanValidationTest, UnknownKernel) {
  PlanBuilder builder = SmallChain();
  builder.mutable_plan().mutable_tasks(1)->mutable_kernel()->set_op_type("warp_drive");
  ExpectRejected(builder.plan(), absl::StatusCode::kNotFound,
                 "task 'plus': no kernel for op type 'warp_drive' on cpu");
}

TEST(PlanValidationTest, KernelRejectingItsConfiguration) {
  PlanBuilder builder = SmallChain();
  builder.mutable_plan().mutable_tasks(1)->mutable_kernel()->set_op_type("test_fail");
  ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                 "task 'plus' (op 'test_fail'): missing attribute 'fail_piece'");
}

TEST(PlanValidationTest, ZeroSlotRegister) {
  PlanBuilder builder = SmallChain();
  builder.mutable_plan().mutable_registers(1)->set_num_slots(0);
  ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                 "register 'y' has 0 slots");
}

TEST(PlanValidationTest, LookaheadOnlyOnComputeTasksWithinTheSlots) {
  {
    PlanBuilder builder = SmallChain();
    builder.mutable_plan().mutable_tasks(2)->add_input_lookahead(1);
    ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                   "task 'sink': only COMPUTE tasks may look ahead on their inputs (a SINK task "
                   "does)");
  }
  {
    PlanBuilder builder = SmallChain();
    builder.mutable_plan().mutable_tasks(1)->add_input_lookahead(1);
    builder.mutable_plan().mutable_tasks(1)->add_input_lookahead(1);
    ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                   "task 'plus': 2 input_lookahead counts for 1 inputs");
  }
  for (int lookahead : {-1, 2}) {
    PlanBuilder builder = SmallChain();
    builder.mutable_plan().mutable_tasks(1)->add_input_lookahead(lookahead);
    ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                   absl::StrCat("task 'plus': input_lookahead ", lookahead,
                                " on input 'x' must be >= 0 and below its 2 slots"));
  }
  PlanBuilder builder = SmallChain();
  builder.mutable_plan().mutable_tasks(1)->add_input_lookahead(1);
  EXPECT_TRUE(ValidatePlan(builder.plan()).ok());
}

TEST(PlanValidationTest, OrderingInputsOnlyOnComputeAndCollectiveTasksWithinTheirInputs) {
  {
    PlanBuilder builder = SmallChain();
    builder.mutable_plan().mutable_tasks(2)->set_ordering_inputs(1);
    ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                   "task 'sink': only COMPUTE and COLLECTIVE tasks may have ordering inputs (a "
                   "SINK task does)");
  }
  for (int count : {-1, 2}) {
    PlanBuilder builder = SmallChain();
    builder.mutable_plan().mutable_tasks(1)->set_ordering_inputs(count);
    ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                   absl::StrCat("task 'plus': ordering_inputs ", count,
                                " must be >= 0 and at most its 1 inputs"));
  }
}

TEST(PlanValidationTest, CycleThatCanNeverAct) {
  PlanBuilder builder("cycle");
  builder.AddCpuDevices(1);
  builder.AddRegister("a_out", {1}).AddRegister("b_out", {1}).AddRegister("c_out", {1});
  builder.AddTask("a", plan::COMPUTE, 0, {"c_out"}, {"a_out"}, "test_sum_plus_one");
  builder.AddTask("b", plan::COMPUTE, 0, {"a_out"}, {"b_out"}, "test_sum_plus_one");
  builder.AddTask("c", plan::COMPUTE, 0, {"b_out"}, {"c_out"}, "test_sum_plus_one");
  ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                 "cycle that can never act: 'a' -> 'b' -> 'c' -> 'a'");
}

TEST(PlanValidationTest, DoublyProducedRegister) {
  PlanBuilder builder = SmallChain();
  builder.AddTask("second", plan::SOURCE, 0, {}, {"x"}, "test_piece");
  ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                 "register 'x' is produced by both 'source' and 'second'");
}

TEST(PlanValidationTest, TaskOnAnUndeclaredDevice) {
  PlanBuilder builder = SmallChain();
  builder.AddRegister("z", {4});
  builder.AddTask("far", plan::COMPUTE, 7, {"y"}, {"z"}, "test_sum_plus_one");
  ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                 "task 'far' runs on device node0/cpu:7, which is not among the plan's devices");
}

TEST(PlanValidationTest, DuplicateTaskName) {
  PlanBuilder builder = SmallChain();
  builder.AddRegister("z", {4});
  builder.AddTask("plus", plan::COMPUTE, 0, {"y"}, {"z"}, "test_sum_plus_one");
  ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                 "task 'plus' is declared twice");
}

TEST(PlanValidationTest, WrongArityForAKind) {
  PlanBuilder sink_with_output = SmallChain();
  sink_with_output.AddRegister("extra", {4});
  sink_with_output.mutable_plan().mutable_tasks(2)->add_outputs("extra");
  ExpectRejected(sink_with_output.plan(), absl::StatusCode::kInvalidArgument,
                 "task 'sink': a sink task writes 0 registers, not 1");
}

TEST(PlanValidationTest, UnpackThatDoesNotDivide) {
  PlanBuilder builder("unpack");
  builder.AddCpuDevices(1);
  builder.AddRegister("batch", {6, 2}).AddRegister("micro", {2, 2});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"batch"}, "test_piece").set_num_pieces(1);
  builder.AddTask("unpack", plan::UNPACK, 0, {"batch"}, {"micro"}).set_factor(4);
  builder.AddTask("sink", plan::SINK, 0, {"micro"}, {});
  ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                 "task 'unpack': cannot unpack [6, 2] into 4 pieces along axis 0");
}

TEST(PlanValidationTest, RegisterProducerFieldMustAgree) {
  PlanBuilder builder = SmallChain();
  builder.mutable_plan().mutable_registers(0)->set_producer("plus");
  ExpectRejected(builder.plan(), absl::StatusCode::kInvalidArgument,
                 "register 'x' says its producer is 'plus', but 'source' writes it");
}

// Issue 56, finding 2: `loomctl run-plan` runs a plan file without the compiler, so validation
// must refuse what the compiler refuses. [24, 768614336404564651] has 8 elements modulo 2^64: the
// register would be 32 bytes while kernels touch what its shape says.
void ExpectInvalid(const plan::Plan& plan, const std::string& text) {
  absl::Status status = ValidatePlan(plan);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(text));
}

TEST(PlanValidationTest, RegisterWhoseElementCountWrapsIsRefused) {
  PlanBuilder builder = SmallChain();
  builder.mutable_plan().mutable_registers(1)->mutable_tensor()->clear_shape();
  builder.mutable_plan().mutable_registers(1)->mutable_tensor()->add_shape(24);
  builder.mutable_plan().mutable_registers(1)->mutable_tensor()->add_shape(768614336404564651);
  ExpectInvalid(builder.plan(), "register 'y': shape [24, 768614336404564651] has more than 2^48");
}

TEST(PlanValidationTest, RegisterBeyondTheTensorLimitIsRefused) {
  PlanBuilder builder = SmallChain();
  builder.mutable_plan().mutable_registers(0)->mutable_tensor()->set_shape(0, int64_t{1} << 49);
  ExpectInvalid(builder.plan(), "register 'x': shape [562949953421312] has more than 2^48");
}

TEST(PlanValidationTest, RegisterWithANegativeExtentIsRefused) {
  PlanBuilder builder = SmallChain();
  builder.mutable_plan().mutable_registers(0)->mutable_tensor()->set_shape(0, -4);
  ExpectInvalid(builder.plan(), "register 'x': shape [-4] has a negative extent");
}

TEST(PlanValidationTest, RegisterOfTheLimitPasses) {
  PlanBuilder builder = SmallChain();
  // 2^48 elements (2^50 bytes): allowed by validation, which allocates nothing.
  builder.mutable_plan().mutable_registers(0)->mutable_tensor()->set_shape(0, int64_t{1} << 48);
  builder.mutable_plan().mutable_registers(1)->mutable_tensor()->set_shape(0, int64_t{1} << 48);
  EXPECT_TRUE(ValidatePlan(builder.plan()).ok()) << ValidatePlan(builder.plan());
}

TEST(PlanValidationTest, FetchWhoseHierarchyProductWrapsIsRefused) {
  PlanBuilder builder = SmallChain();
  plan::Fetch* fetch = builder.mutable_plan().add_fetches();
  fetch->set_tensor("y");
  fetch->mutable_logical()->add_shape(4);
  fetch->mutable_logical()->set_data_type(plan::FLOAT32);
  // 7 * 7905747460161236407 is 1 modulo 2^64: one sink would pass a wrapping check.
  fetch->add_hierarchy(7);
  fetch->add_hierarchy(7905747460161236407);
  fetch->add_sbp("B");
  fetch->add_sbp("B");
  fetch->add_sinks("sink");
  ExpectInvalid(builder.plan(),
                "fetch 'y': hierarchy [7, 7905747460161236407] does not lay out its 1 sinks");
}

TEST(PlanValidationTest, FetchWhoseLogicalShapeOverflowsIsRefused) {
  PlanBuilder builder = SmallChain();
  plan::Fetch* fetch = builder.mutable_plan().add_fetches();
  fetch->set_tensor("y");
  fetch->mutable_logical()->add_shape(int64_t{1} << 32);
  fetch->mutable_logical()->add_shape(int64_t{1} << 32);
  fetch->mutable_logical()->set_data_type(plan::FLOAT32);
  fetch->add_hierarchy(1);
  fetch->add_sinks("sink");
  ExpectInvalid(builder.plan(), "fetch 'y': its logical tensor's shape [4294967296, 4294967296]");
}

TEST(PlanValidationTest, VariableLayoutWithMoreRanksThanTasksIsRefused) {
  PlanBuilder builder = SmallChain();
  plan::VariableLayout* variable = builder.mutable_plan().add_variables();
  variable->set_name("w");
  variable->mutable_logical()->add_shape(4);
  variable->mutable_logical()->set_data_type(plan::FLOAT32);
  variable->add_hierarchy(int64_t{1} << 40);
  variable->add_tasks("source");
  ExpectInvalid(builder.plan(),
                "variable layout 'w': hierarchy [1099511627776] does not lay out its 1 tasks");
}

TEST(PlanValidationTest, CommunicatorWithMoreCollectivesThanTasksIsRefused) {
  PlanBuilder builder = SmallChain();
  plan::Communicator* communicator = builder.mutable_plan().add_communicators();
  communicator->set_name("c");
  for (int index = 0; index < 2; ++index) {
    plan::Device* device = communicator->add_devices();
    device->set_type(plan::CPU);
    device->set_index(index);
  }
  // Validation would keep a table of 2^31 - 1 collectives by 2 ranks.
  communicator->set_num_collectives(2147483647);
  ExpectInvalid(builder.plan(), "communicator 'c' has num_collectives 2147483647, more than");
}

TEST(PlanTextTest, ParsesAHandWrittenPlan) {
  const char* text = R"pb(
    job_name: "hand"
    devices { device { type: CPU index: 0 } }
    registers { name: "x" tensor { shape: [ 2 ] data_type: FLOAT32 } num_slots: 1 }
    tasks {
      name: "source"
      kind: SOURCE
      stream { device { type: CPU index: 0 } }
      outputs: "x"
      kernel { op_type: "test_piece" }
      num_pieces: 4
    }
    tasks {
      name: "sink"
      kind: SINK
      stream { device { type: CPU index: 0 } }
      inputs: "x"
    }
  )pb";
  auto plan = ParsePlanText(text, "hand.pbtxt");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto job = MakeJob(*plan);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  EXPECT_EQ(SinkValues(**job, "sink").size(), 4u);
}

TEST(PlanTextTest, SyntaxErrorsNameTheLine) {
  auto plan = ParsePlanText("job_name: \"x\"\ntasks {\n  nmae: \"oops\"\n}\n", "broken.pbtxt");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("broken.pbtxt"));
  EXPECT_THAT(plan.status().message(), HasSubstr("line 3"));
  EXPECT_THAT(plan.status().message(), HasSubstr("nmae"));
}

}  // namespace
}  // namespace loom::testing
