// Plan validation of collectives: communicators, ranks, communication streams, sequences agreed
// across ranks, and the shapes and data types each kind accepts.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"
#include "runtime/plan_validation.h"
#include "testing/plan_builder.h"
#include "tests/runtime/collective_test_util.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

// Two ranks, two all-reduces ('a' then 'b') on communicator "tp".
PlanBuilder ValidPair() {
  PlanBuilder builder("pair");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "tp", {0, 1}, 2);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    builder.AddRegister("x" + r, {6}).AddRegister("y" + r, {6}).AddRegister("z" + r, {6});
    builder.AddTask("source" + r, plan::SOURCE, rank, {}, {"x" + r}, "test_piece")
        .set_num_pieces(2);
    AddCollective(builder, "a" + r, rank, "x" + r, "y" + r, Conf("tp", plan::ALL_REDUCE, 0, "a"),
                  rank);
    AddCollective(builder, "b" + r, rank, "y" + r, "z" + r, Conf("tp", plan::ALL_REDUCE, 1, "b"),
                  rank);
    builder.AddTask("sink" + r, plan::SINK, rank, {"z" + r}, {});
  }
  return builder;
}

plan::Task& TaskNamed(PlanBuilder& builder, const std::string& name) {
  for (plan::Task& task : *builder.mutable_plan().mutable_tasks()) {
    if (task.name() == name) return task;
  }
  ADD_FAILURE() << name;
  return *builder.mutable_plan().mutable_tasks(0);
}

void ExpectInvalid(const PlanBuilder& builder, const std::string& text) {
  absl::Status status = ValidatePlan(builder.plan());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(text));
}

TEST(CollectiveValidationTest, AValidPairRuns) {
  PlanBuilder builder = ValidPair();
  ASSERT_TRUE(ValidatePlan(builder.plan()).ok()) << ValidatePlan(builder.plan());
  auto job = MakeCollectiveJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  // test_piece fills piece p with p; two all-reduces over 2 ranks multiply by 4.
  EXPECT_THAT(SinkValues(**job, "sink0"), ::testing::ElementsAre(0.0f, 4.0f));
  EXPECT_THAT(SinkValues(**job, "sink1"), ::testing::ElementsAre(0.0f, 4.0f));
}

TEST(CollectiveValidationTest, UnknownCommunicator) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "a1").mutable_collective()->set_communicator("dp");
  ExpectInvalid(builder,
                "task 'a1': collective on communicator 'dp', which the plan does not "
                "declare");
}

TEST(CollectiveValidationTest, MissingKind) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "a1").mutable_collective()->set_kind(plan::COLLECTIVE_KIND_UNSPECIFIED);
  ExpectInvalid(builder, "task 'a1': the collective has no kind");
}

TEST(CollectiveValidationTest, RankOutOfRange) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "a1").set_rank(2);
  ExpectInvalid(builder, "task 'a1': rank 2 is outside communicator 'tp' of 2 ranks");
}

TEST(CollectiveValidationTest, RankOnTheWrongDevice) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "a1").set_rank(0);
  ExpectInvalid(builder,
                "task 'a1': runs on node0/cpu:1 as rank 0 of communicator 'tp', whose "
                "rank 0 is node0/cpu:0");
}

TEST(CollectiveValidationTest, NotOnACommunicationStream) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "b0").mutable_stream()->set_kind(plan::STREAM_COMPUTE);
  ExpectInvalid(builder,
                "task 'b0': a collective runs on a communication stream, not on "
                "node0/cpu:0/compute");
}

// A collective reads its data input and then only its ordering inputs.
TEST(CollectiveValidationTest, ASecondInputIsAnOrderingInputOrRefused) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "b0").add_inputs("x0");
  ExpectInvalid(builder, "task 'b0': a collective task reads 1 registers, not 2");
  TaskNamed(builder, "b0").set_ordering_inputs(1);
  EXPECT_TRUE(ValidatePlan(builder.plan()).ok()) << ValidatePlan(builder.plan());
}

TEST(CollectiveValidationTest, OneRanksCollectivesOnTwoStreams) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "b0").mutable_stream()->set_index(1);
  ExpectInvalid(builder, "share one communication stream");
}

TEST(CollectiveValidationTest, TwoCommunicatorsOnOneStream) {
  PlanBuilder builder = ValidPair();
  AddCommunicator(builder, "dp", {0, 1}, 1);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    builder.AddRegister("w" + r, {6});
    AddCollective(builder, "c" + r, rank, "z" + r, "w" + r, Conf("dp", plan::ALL_REDUCE, 0, "c"),
                  rank);
  }
  ExpectInvalid(builder, "each communicator needs its own communication stream");
}

TEST(CollectiveValidationTest, OtherTasksOnACollectiveStream) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "sink1").mutable_stream()->set_kind(plan::STREAM_COMMUNICATION);
  ExpectInvalid(builder,
                "task 'sink1' runs on node0/cpu:1/communication, which runs the "
                "collectives of communicator 'tp'");
}

TEST(CollectiveValidationTest, SequenceOutOfRange) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "b1").mutable_collective()->set_sequence(2);
  ExpectInvalid(builder, "task 'b1': sequence 2 is outside [0, 2) of communicator 'tp'");
}

TEST(CollectiveValidationTest, RanksListingDifferentSequencesAreRejected) {
  // Rank 1 runs 'b' first and 'a' second: a hang in the making.
  PlanBuilder builder = ValidPair();
  *TaskNamed(builder, "a1").mutable_collective() = Conf("tp", plan::ALL_REDUCE, 1, "a");
  *TaskNamed(builder, "b1").mutable_collective() = Conf("tp", plan::ALL_REDUCE, 0, "b");
  ExpectInvalid(builder,
                "task 'b1' (rank 1) runs all-reduce 'b' (sequence 0) sum while 'a0' "
                "(rank 0) runs all-reduce 'a' (sequence 0) sum");
}

TEST(CollectiveValidationTest, DifferentKindsAcrossRanks) {
  PlanBuilder builder = ValidPair();
  plan::CollectiveConf* conf = TaskNamed(builder, "a1").mutable_collective();
  conf->set_kind(plan::ALL_GATHER);
  // Make the shapes fit a gather of 2 x [6] locally (y1 and z1 become [12]), so that the
  // cross-rank check speaks.
  builder.mutable_plan().mutable_registers(4)->mutable_tensor()->set_shape(0, 12);
  builder.mutable_plan().mutable_registers(5)->mutable_tensor()->set_shape(0, 12);
  ExpectInvalid(builder,
                "task 'a1' (rank 1) runs all-gather 'a' (sequence 0) axis 0 while 'a0' "
                "(rank 0) runs all-reduce 'a' (sequence 0) sum");
}

TEST(CollectiveValidationTest, TwoTasksForOneRankAndSequence) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "b1").mutable_collective()->set_sequence(0);
  ExpectInvalid(builder, "task 'b1': both 'a1' and 'b1' are rank 1 of sequence 0");
}

TEST(CollectiveValidationTest, NoTaskForARank) {
  PlanBuilder builder = ValidPair();
  // Rank 1's sequence 1 task moves to another communicator of its own.
  AddCommunicator(builder, "solo", {1}, 1);
  TaskNamed(builder, "b1").mutable_collective()->set_communicator("solo");
  TaskNamed(builder, "b1").mutable_collective()->set_sequence(0);
  TaskNamed(builder, "b1").set_rank(0);
  TaskNamed(builder, "b1").mutable_stream()->set_index(1);
  ExpectInvalid(builder,
                "communicator 'tp': task 'b0' runs sequence 1 but no task runs it for "
                "rank 1 (node0/cpu:1)");
}

TEST(CollectiveValidationTest, AllReduceThatChangesTheShape) {
  PlanBuilder builder = ValidPair();
  // y0 (register 1) becomes [5].
  builder.mutable_plan().mutable_registers(1)->mutable_tensor()->set_shape(0, 5);
  ExpectInvalid(builder, "task 'a0': all-reduce on rank 0 of 2: input [6] and output [5] differ");
}

TEST(CollectiveValidationTest, ReductionOfIntegers) {
  PlanBuilder builder = ValidPair();
  for (int r : {0, 1, 2}) {
    builder.mutable_plan().mutable_registers(r)->mutable_tensor()->set_data_type(plan::INT64);
  }
  ExpectInvalid(builder, "task 'a0': all-reduce reduces float32 only, not int64");
}

TEST(CollectiveValidationTest, GatherWhoseOutputDoesNotMatchThePeers) {
  PlanBuilder builder("gather");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "tp", {0, 1}, 1);
  builder.AddRegister("x0", {4, 3}).AddRegister("x1", {3, 3});
  builder.AddRegister("y0", {7, 3}).AddRegister("y1", {8, 3});
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    builder.AddTask("source" + r, plan::SOURCE, rank, {}, {"x" + r}, "test_piece");
    plan::CollectiveConf conf = Conf("tp", plan::ALL_GATHER, 0, "gather");
    AddCollective(builder, "gather" + r, rank, "x" + r, "y" + r, conf, rank);
  }
  ExpectInvalid(builder,
                "task 'gather1': its output register 'y1' is [8, 3], but the all-gather "
                "of the ranks' inputs gives rank 1 [7, 3]");
}

TEST(CollectiveValidationTest, ReduceScatterSliceOfTheWrongSize) {
  PlanBuilder builder("scatter");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "tp", {0, 1}, 1);
  builder.AddRegister("x0", {7, 3}).AddRegister("x1", {7, 3});
  builder.AddRegister("y0", {3, 3}).AddRegister("y1", {3, 3});
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    builder.AddTask("source" + r, plan::SOURCE, rank, {}, {"x" + r}, "test_piece");
    AddCollective(builder, "scatter" + r, rank, "x" + r, "y" + r,
                  Conf("tp", plan::REDUCE_SCATTER, 0, "scatter"), rank);
  }
  ExpectInvalid(builder,
                "task 'scatter0': reduce-scatter on rank 0 of 2: input [7, 3] and output "
                "[3, 3] do not fit: rank 0 keeps 4 of the 7 entries along axis 0");
}

TEST(CollectiveValidationTest, AxisOutOfRange) {
  PlanBuilder builder("axis");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "tp", {0, 1}, 1);
  builder.AddRegister("x0", {2}).AddRegister("x1", {2});
  builder.AddRegister("y0", {4}).AddRegister("y1", {4});
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    builder.AddTask("source" + r, plan::SOURCE, rank, {}, {"x" + r}, "test_piece");
    plan::CollectiveConf conf = Conf("tp", plan::ALL_GATHER, 0, "gather");
    conf.set_axis(1);
    AddCollective(builder, "gather" + r, rank, "x" + r, "y" + r, conf, rank);
  }
  ExpectInvalid(builder, "task 'gather0': all-gather axis 1 is out of range for [2]");
}

TEST(CollectiveValidationTest, WrongArity) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "a0").add_inputs("x1");
  ExpectInvalid(builder, "task 'a0': a collective task reads 1 registers, not 2");
}

}  // namespace
}  // namespace loom::testing
