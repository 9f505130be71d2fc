// Jobs with collectives that fail: a producer failing while a peer waits in the collective, a rank
// that never arrives, and a communicator that spans another node.
#include <chrono>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"
#include "testing/plan_builder.h"
#include "tests/runtime/collective_test_util.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

TEST(CollectiveFailureTest, AProducerFailingWhileAPeerWaitsEndsTheJobPromptlyWithItsError) {
  // Rank 1's input goes through a 20 ms sleep and then fails on piece 2, so rank 0 waits inside
  // the collective of piece 2 when the job fails; the abort must wake it long before the
  // collective timeout.
  PlanBuilder builder("abort_in_collective");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "dp", {0, 1}, 1);
  builder.AddRegister("in0", {8}).AddRegister("out0", {8});
  builder.AddRegister("raw1", {8}).AddRegister("slept1", {8}).AddRegister("in1", {8});
  builder.AddRegister("out1", {8});
  builder.AddTask("source0", plan::SOURCE, 0, {}, {"in0"}, "test_piece").set_num_pieces(5);
  builder.AddTask("source1", plan::SOURCE, 1, {}, {"raw1"}, "test_piece").set_num_pieces(5);
  plan::Task& sleep = builder.AddTask("sleep", plan::COMPUTE, 1, {"raw1"}, {"slept1"}, "sleep");
  PlanBuilder::SetAttribute(sleep, "microseconds", 20'000);
  plan::Task& failer =
      builder.AddTask("failer", plan::COMPUTE, 1, {"slept1"}, {"in1"}, "test_fail");
  PlanBuilder::SetAttribute(failer, "fail_piece", 2);
  AddCollective(builder, "reduce0", 0, "in0", "out0", Conf("dp", plan::ALL_REDUCE, 0, "grads"), 0);
  AddCollective(builder, "reduce1", 1, "in1", "out1", Conf("dp", plan::ALL_REDUCE, 0, "grads"), 1);
  builder.AddTask("sink0", plan::SINK, 0, {"out0"}, {});
  builder.AddTask("sink1", plan::SINK, 1, {"out1"}, {});
  JobOptions options;
  options.collective_timeout = absl::Seconds(60);
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto job = MakeCollectiveJob(builder.plan(), options);
    ASSERT_TRUE(job.ok()) << job.status();
    auto start = std::chrono::steady_clock::now();
    absl::Status status = (*job)->Run();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(status.message(), HasSubstr("actor 'failer'"));
    EXPECT_THAT(status.message(), HasSubstr("injected failure at piece 2"));
    // Rank 0 was inside the collective of piece 2 (its act is recorded, ended by the abort), and
    // nothing after the failure reached a sink.
    std::vector<ActEvent> acts = EventsOf(**job, "reduce0");
    ASSERT_EQ(acts.size(), 3u);
    EXPECT_EQ(acts[2].piece, 2);
    EXPECT_GE(acts[2].end_nanoseconds - acts[2].start_nanoseconds, 10'000'000);
    EXPECT_LE(SinkValues(**job, "sink0").size(), 2u);
    EXPECT_LE(SinkValues(**job, "sink1").size(), 2u);
  }
}

TEST(CollectiveFailureTest, ARankThatNeverArrivesEndsTheJobWithADeadlineNamingIt) {
  // Rank 1 runs 2 pieces, rank 0 runs 3: rank 0 waits for rank 1 at piece 2.
  CollectiveCase c;
  c.label = "unequal_ranks";
  c.kind = plan::ALL_REDUCE;
  c.inputs = SameShapes({4}, 2);
  plan::Plan plan = CasePlan(c);
  for (plan::Task& task : *plan.mutable_tasks()) {
    if (task.name() == "source1") task.set_num_pieces(2);
  }
  JobOptions options;
  options.collective_timeout = absl::Milliseconds(300);
  auto job = MakeCollectiveJob(plan, options);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status status = (*job)->Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("actor 'collective0'"));
  EXPECT_THAT(status.message(),
              HasSubstr("communicator 'group': collective 'unequal_ranks' (sequence 0) on rank 0 "
                        "waited 300ms at piece 2 for rank 1 to arrive"));
}

TEST(CollectiveFailureTest, ACommunicatorOnAnotherNodeNeedsAnotherBackend) {
  PlanBuilder builder("two_nodes");
  builder.AddCpuDevices(1);
  plan::Communicator* communicator = builder.mutable_plan().add_communicators();
  communicator->set_name("across");
  *communicator->add_devices() = CpuDevice(0);
  plan::Device remote = CpuDevice(0);
  remote.set_node(1);
  *communicator->add_devices() = remote;
  communicator->set_num_collectives(1);
  builder.AddRegister("in", {4}).AddRegister("out", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"in"}, "test_piece").set_num_pieces(1);
  AddCollective(builder, "reduce", 0, "in", "out", Conf("across", plan::ALL_REDUCE, 0, "r"), 0);
  auto job = MakeCollectiveJob(builder.plan());
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(job.status().message(), HasSubstr("communicator 'across' spans node 1"));
  EXPECT_THAT(job.status().message(), HasSubstr("UCX backend"));
}

}  // namespace
}  // namespace loom::testing
