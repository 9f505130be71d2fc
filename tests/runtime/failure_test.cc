// Every way a job ends badly ends it with one error naming the cause, and releases every thread.
#include <chrono>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

plan::Plan FailingChain(int pieces, int fail_piece) {
  PlanBuilder builder("failing");
  builder.AddCpuDevices(3);
  builder.AddRegister("x", {32}).AddRegister("y", {32}).AddRegister("z", {32});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(pieces);
  plan::Task& failer = builder.AddTask("failer", plan::COMPUTE, 1, {"x"}, {"y"}, "test_fail");
  PlanBuilder::SetAttribute(failer, "fail_piece", fail_piece);
  builder.AddTask("after", plan::COMPUTE, 2, {"y"}, {"z"}, "test_sum_plus_one");
  builder.AddTask("sink", plan::SINK, 2, {"z"}, {});
  return builder.plan();
}

TEST(FailureTest, KernelErrorOnPieceSevenOfHundredEndsTheRun) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    auto job = MakeJob(FailingChain(100, 7));
    ASSERT_TRUE(job.ok()) << job.status();
    absl::Status status = (*job)->Run();
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(status.message(), HasSubstr("actor 'failer'"));
    EXPECT_THAT(status.message(), HasSubstr("piece 7"));
    EXPECT_THAT(status.message(), HasSubstr("injected failure at piece 7"));
    // Nothing after the failure reached the sink.
    EXPECT_LE(SinkValues(**job, "sink").size(), 7u);
  }
}

TEST(FailureTest, AbortFromOutsideEndsARunningJob) {
  PlanBuilder builder("endless");
  builder.AddCpuDevices(2);
  builder.AddRegister("x", {4}).AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(1'000'000'000);
  plan::Task& work = builder.AddTask("work", plan::COMPUTE, 1, {"x"}, {"y"}, "test_spin");
  PlanBuilder::SetAttribute(work, "microseconds", 100);
  builder.AddTask("sink", plan::SINK, 1, {"y"}, {});
  // A sink keeping a billion pieces would exhaust memory: give the device a budget, and abort
  // long before it is reached.
  builder.mutable_plan().mutable_devices(1)->set_memory_budget_bytes(64 << 20);
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  (*job)->Abort(absl::CancelledError("cancelled by the test"));
  absl::Status status = (*job)->Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(status.message(), HasSubstr("cancelled by the test"));
}

// A sleep of 10^12 microseconds (11.6 days), as a job may ask for.
plan::Plan EndlessSleep() {
  PlanBuilder builder("endless_sleep");
  builder.AddCpuDevices(2);
  builder.AddRegister("x", {4}).AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(3);
  plan::Task& sleep = builder.AddTask("sleep", plan::COMPUTE, 1, {"x"}, {"y"}, "sleep");
  PlanBuilder::SetAttribute(sleep, "microseconds", 1'000'000'000'000);
  builder.AddTask("sink", plan::SINK, 1, {"y"}, {});
  return builder.plan();
}

TEST(FailureTest, AbortReachesAKernelInTheMiddleOfAnActWithinASecond) {
  auto job = MakeJob(EndlessSleep());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Start().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto aborted_at = std::chrono::steady_clock::now();
  (*job)->Abort(absl::CancelledError("cancelled by the test"));
  EXPECT_TRUE((*job)->ending());
  absl::Status status = (*job)->Wait();
  EXPECT_LT(std::chrono::steady_clock::now() - aborted_at, std::chrono::seconds(1));
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(status.message(), HasSubstr("cancelled by the test"));
  job->reset();

  // The process is fine: the next job runs to its end.
  auto next = MakeJob(FailingChain(10, /*fail_piece=*/-1));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_FALSE((*next)->ending());
  ASSERT_TRUE((*next)->Run().ok());
  EXPECT_EQ(SinkValues(**next, "sink").size(), 10u);
  EXPECT_FALSE((*next)->ending());
}

TEST(FailureTest, AFailureElsewhereEndsASleepingKernel) {
  // Another actor's failure ends the job; the sleeping kernel sees it too.
  PlanBuilder builder("sleep_and_fail");
  builder.AddCpuDevices(3);
  builder.AddRegister("x", {4}).AddRegister("y", {4}).AddRegister("z", {4}).AddRegister("w", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x", "z"}, "test_piece").set_num_pieces(3);
  plan::Task& sleep = builder.AddTask("sleep", plan::COMPUTE, 1, {"x"}, {"y"}, "sleep");
  PlanBuilder::SetAttribute(sleep, "microseconds", 1'000'000'000'000);
  builder.AddTask("sink", plan::SINK, 1, {"y"}, {});
  plan::Task& failer = builder.AddTask("failer", plan::COMPUTE, 2, {"z"}, {"w"}, "test_fail");
  PlanBuilder::SetAttribute(failer, "fail_piece", 0);
  builder.AddTask("failer_sink", plan::SINK, 2, {"w"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  const auto started_at = std::chrono::steady_clock::now();
  absl::Status status = (*job)->Run();
  EXPECT_LT(std::chrono::steady_clock::now() - started_at, std::chrono::seconds(2));
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(), HasSubstr("actor 'failer'"));
}

TEST(FailureTest, AnEndedJobKeepsItsOutcome) {
  // A node's job has ended when its peers are released and leave, or when a late abort comes.
  auto job = MakeJob(FailingChain(10, /*fail_piece=*/-1));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  (*job)->Fail(absl::UnavailableError("the connection to peer 1 failed"));
  (*job)->Abort(absl::AbortedError("released by the coordinator"));
  EXPECT_TRUE((*job)->Wait().ok());
}

TEST(FailureTest, DestroyingARunningJobAbortsAndJoins) {
  PlanBuilder builder("destroyed");
  builder.AddCpuDevices(2);
  builder.AddRegister("x", {4}).AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(1'000'000);
  builder.AddTask("work", plan::COMPUTE, 1, {"x"}, {"y"}, "test_sum_plus_one");
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Start().ok());
  job->reset();  // must not hang or leak
}

TEST(FailureTest, StallIsDetectedAndNamesWhatEachActorWaitsFor) {
  // `late` needs the sum of four pieces and piece 0 itself; piece 0's only slot stays held by
  // `late`, so the source can never produce pieces 1..3 and the accumulator never completes.
  PlanBuilder builder("stall");
  builder.AddCpuDevices(2);
  builder.AddRegister("x", {2}, plan::FLOAT32, 1).AddRegister("sum", {2}).AddRegister("out", {2});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(8);
  builder.AddTask("accumulate", plan::ACCUMULATE, 1, {"x"}, {"sum"}).set_factor(4);
  builder.AddTask("late", plan::COMPUTE, 0, {"x", "sum"}, {"out"}, "test_sum_plus_one");
  JobOptions options;
  options.stall_timeout = absl::Milliseconds(300);
  auto job = MakeJob(builder.plan(), options);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status status = (*job)->Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("stalled"));
  EXPECT_THAT(status.message(),
              HasSubstr("'late' waits for input register 'sum' from 'accumulate'"));
  EXPECT_THAT(status.message(), HasSubstr("'source' waits for a free slot of output register 'x'"));
}

TEST(FailureTest, MemoryBudgetExceededIsAnErrorNamingTheDeviceAndRegister) {
  PlanBuilder builder("too_big");
  builder.AddCpuDevices(1, /*memory_budget_bytes=*/16 << 10);
  builder.AddRegister("small", {256}, plan::FLOAT32, 2);
  builder.AddRegister("big", {4096}, plan::FLOAT32, 2);
  builder.AddTask("source", plan::SOURCE, 0, {}, {"small"}, "test_piece").set_num_pieces(1);
  builder.AddTask("grow", plan::COMPUTE, 0, {"small"}, {"big"}, "test_piece");
  auto job = MakeJob(builder.plan());
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(job.status().message(), HasSubstr("node0/cpu:0"));
  EXPECT_THAT(job.status().message(), HasSubstr("register 'big'"));
  EXPECT_THAT(job.status().message(), HasSubstr("16.0 KiB"));
}

TEST(FailureTest, SinkBeyondTheBudgetFailsTheJobInsteadOfCrashing) {
  PlanBuilder builder("sink_budget");
  builder.AddCpuDevices(1, /*memory_budget_bytes=*/64 << 10);
  builder.AddRegister("x", {1024}, plan::FLOAT32, 2);
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(100);
  builder.AddTask("keep", plan::SINK, 0, {"x"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status status = (*job)->Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("actor 'keep'"));
  EXPECT_THAT(status.message(), HasSubstr("sink 'keep'"));
}

TEST(FailureTest, MemoryIsReturnedWhenTheJobEnds) {
  auto job = MakeJob(FailingChain(20, 1000));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  // Registers are still held (the job may be inspected); the accounting matches them exactly.
  int64_t register_bytes = 0;
  for (const auto& memory : (*job)->device_memories()) register_bytes += memory->used_bytes();
  // 3 registers of 2 slots of 32 floats, plus the sink's 20 kept pieces.
  EXPECT_EQ(register_bytes, 3 * 2 * 32 * 4 + 20 * 32 * 4);
}

TEST(FailureTest, AccumulateWithAPartialGroupFails) {
  PlanBuilder builder("partial");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {2}).AddRegister("sum", {2});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(6);
  builder.AddTask("accumulate", plan::ACCUMULATE, 0, {"x"}, {"sum"}).set_factor(4);
  builder.AddTask("sink", plan::SINK, 0, {"sum"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status status = (*job)->Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("actor 'accumulate'"));
  EXPECT_THAT(status.message(), HasSubstr("2 of the 4 pieces"));
}

}  // namespace
}  // namespace loom::testing
