// A worker whose --max-message-size is smaller than its coordinator's: the jobs whose messages
// would not fit between them (the worker's part of the plan, a streamed piece) are refused at
// submit with RESOURCE_EXHAUSTED naming the node and the limit, and the worker stays in the
// cluster (a message over the limit would have ended its session: the node lost, its job failed
// with nothing but "was lost").
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_test_util.h"

namespace loom::daemon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr int64_t kWorkerMessageBytes = 16 << 10;
constexpr int kCoordinatorMessageBytes = 64 << 10;  // SmallCoordinatorMessagesTest

class MessageLimitsTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    DaemonOptions options = TestOptions();
    options.node_name = "small-messages";
    options.coordinator_address = daemon_->address();
    options.max_message_bytes = kWorkerMessageBytes;
    absl::StatusOr<std::unique_ptr<Daemon>> worker = Daemon::Start(options);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = *std::move(worker);
    ASSERT_TRUE(WorkerReady());
  }

  void TearDown() override {
    if (worker_ != nullptr) worker_->Shutdown(absl::ZeroDuration());
    DaemonTest::TearDown();
  }

  // Whether node 1 is READY (waiting up to 20 s for it).
  bool WorkerReady() {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      v1::ListNodesResponse nodes;
      if (cluster_->ListNodes(ContextWithDeadline().get(), v1::ListNodesRequest(), &nodes).ok() &&
          nodes.nodes_size() == 2 && nodes.nodes(1).state() == v1::NODE_STATE_READY) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  static void PlaceOn(job::Job& job, const std::vector<std::string>& devices) {
    job.mutable_placement()->clear_devices();
    for (const std::string& device : devices) job.mutable_placement()->add_devices(device);
  }

  std::unique_ptr<Daemon> worker_;
};

TEST_F(MessageLimitsTest, AJobWhosePartOnAWorkerIsOverItsMessageLimitIsRefusedAtSubmit) {
  v1::SubmitJobResponse response;
  grpc::Status status = Submit(ReluChain(300, "node1/cpu:0"), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("the part of job 'relu-chain' that runs on node 1"));
  EXPECT_THAT(status.error_message(),
              HasSubstr(absl::StrCat("over the ", kWorkerMessageBytes,
                                     " bytes a message between the coordinator and node 1 "
                                     "('small-messages') may carry")));
  EXPECT_TRUE(WorkerReady());
  // The coordinator's own node gets its part in the process: no message limit.
  const std::string id = SubmitOrDie(ReluChain(300, "node0/cpu:0"));
  EXPECT_TRUE(WaitForState(id, v1::JOB_STATE_SUCCEEDED));
  // A short chain fits the worker's messages and runs there.
  const std::string short_id = SubmitOrDie(ReluChain(2, "node1/cpu:0"));
  EXPECT_TRUE(WaitForState(short_id, v1::JOB_STATE_SUCCEEDED));
}

TEST_F(MessageLimitsTest, AStreamedPieceIsLimitedByTheSmallestMessageLimitOfTheJobsNodes) {
  // 16 KiB per piece (one micro-batch) of 'twice': over half the worker's 16 KiB.
  job::Job fetching = FetchingJob(1);
  for (job::Input& input : *fetching.mutable_inputs()) {
    if (input.name() == "z") input.set_shape(0, 128);
  }
  PlaceOn(fetching, {"node0/cpu:0", "node1/cpu:0"});
  v1::SubmitJobRequest request;
  *request.mutable_job() = fetching;
  request.set_stream_fetches(true);
  v1::SubmitJobResponse response;
  grpc::Status status = SubmitRequest(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("fetched tensor 'twice' [64, 64] has 16384 bytes per piece"));
  EXPECT_THAT(status.error_message(),
              HasSubstr(absl::StrCat(kWorkerMessageBytes / 2,
                                     " bytes: half of the smallest --max-message-size")));
  EXPECT_TRUE(WorkerReady());

  // On the coordinator's devices alone the same job streams.
  PlaceOn(fetching, {"node0/cpu:0", "node0/cpu:1"});
  const std::string alone = SubmitStreamingOrDie(fetching);
  EXPECT_TRUE(WaitForState(alone, v1::JOB_STATE_SUCCEEDED));

  // Small pieces stream from the worker too.
  job::Job counting = CountingJob(2, "ones_total", "ones_per_column");
  PlaceOn(counting, {"node0/cpu:0", "node1/cpu:0"});
  const std::string id = SubmitStreamingOrDie(counting);
  std::vector<v1::JobEvent> events = WatchToEnd(id);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state_change().state(), v1::JOB_STATE_SUCCEEDED)
      << events.back().state_change().error().message();
  std::vector<v1::FetchedTensor> totals;
  for (const v1::JobEvent& event : events) {
    if (event.has_fetched() && event.fetched().tensor() == "ones_total") {
      totals.push_back(event.fetched());
    }
  }
  EXPECT_THAT(totals, SizeIs(4));  // 2 steps x 2 micro-batches
  EXPECT_TRUE(WorkerReady());
}

// The other way round: the coordinator takes 64 KiB, the worker (64 MiB) would send a trace
// larger than that in one update. The worker learns the coordinator's limit at registration and
// sends its trace in parts that fit, as a message over the limit would have ended its session.
class SmallCoordinatorMessagesTest : public MessageLimitsTest {
 protected:
  void SetUp() override {
    DaemonOptions options = TestOptions();
    options.max_message_bytes = kCoordinatorMessageBytes;
    StartDaemon(options);
    options = TestOptions();
    options.node_name = "large-messages";
    options.coordinator_address = daemon_->address();
    absl::StatusOr<std::unique_ptr<Daemon>> worker = Daemon::Start(options);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = *std::move(worker);
    ASSERT_TRUE(WorkerReady());
  }
};

TEST_F(SmallCoordinatorMessagesTest, AWorkersTraceOverTheCoordinatorsLimitComesInParts) {
  job::Job job = TrainingJob(100);
  PlaceOn(job, {"node1/cpu:0", "node1/cpu:1"});
  v1::SubmitJobRequest request;
  *request.mutable_job() = job;
  request.set_trace(true);
  v1::SubmitJobResponse response;
  grpc::Status status = SubmitRequest(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::string id = response.job().job_id();
  std::vector<v1::JobEvent> events = WatchToEnd(id);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state_change().state(), v1::JOB_STATE_SUCCEEDED)
      << events.back().state_change().error().message();
  absl::StatusOr<v1::GetTraceResponse> trace = TraceThroughClient(id, kCoordinatorMessageBytes);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_GT(trace->chrome_trace_json().size(), 4u * kCoordinatorMessageBytes);
  EXPECT_EQ(CompleteEvents(trace->chrome_trace_json()), trace->acts());
  EXPECT_THAT(trace->chrome_trace_json(), HasSubstr("\"name\":\"node1/cpu:1\""));
  EXPECT_TRUE(WorkerReady());
}

}  // namespace
}  // namespace loom::daemon::testing
