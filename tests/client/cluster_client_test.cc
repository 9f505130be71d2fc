// ClusterClient against a loomd in this process (tests/daemon's DaemonTest: a free port, two CPU
// devices): the calls, the status codes they carry back, watching and its cancellation, readiness.
#include "client/cluster_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "compiler/compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_test_util.h"

namespace loom {
namespace {

using daemon::testing::SlowJob;
using daemon::testing::TrainingJob;
using ::testing::HasSubstr;

// A port nothing listens on (bound, then released).
int UnusedPort() {
  const int socket_descriptor = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  bind(socket_descriptor, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(socket_descriptor, reinterpret_cast<sockaddr*>(&address), &length);
  close(socket_descriptor);
  return ntohs(address.sin_port);
}

class ClusterClientTest : public daemon::testing::DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    absl::StatusOr<std::unique_ptr<ClusterClient>> client =
        ClusterClient::Connect(daemon_->address());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }

  // Watches the job to its end: every event.
  std::vector<v1::JobEvent> Watch(const std::string& job_id) {
    std::vector<v1::JobEvent> events;
    WatchOptions options;
    options.timeout = absl::Seconds(60);
    absl::Status status = client_->WatchJob(
        job_id, [&events](const v1::JobEvent& event) { events.push_back(event); }, options);
    EXPECT_TRUE(status.ok()) << status;
    return events;
  }

  std::unique_ptr<ClusterClient> client_;
};

TEST_F(ClusterClientTest, SubmitsWatchesAndGetsATrainingJob) {
  absl::StatusOr<v1::JobInfo> submitted = client_->SubmitJob(TrainingJob(3));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  EXPECT_THAT(submitted->job_id(), HasSubstr("job-"));
  EXPECT_EQ(submitted->state(), v1::JOB_STATE_PENDING);

  std::vector<v1::JobEvent> events = Watch(submitted->job_id());
  EXPECT_EQ(daemon::testing::StepsOf(events).size(), 3u);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state_change().state(), v1::JOB_STATE_SUCCEEDED);

  absl::StatusOr<v1::JobInfo> job = client_->GetJob(submitted->job_id());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(job->steps_done(), 3);

  absl::StatusOr<std::vector<v1::JobInfo>> succeeded = client_->ListJobs({v1::JOB_STATE_SUCCEEDED});
  ASSERT_TRUE(succeeded.ok()) << succeeded.status();
  ASSERT_EQ(succeeded->size(), 1u);
  absl::StatusOr<std::vector<v1::JobInfo>> running = client_->ListJobs({v1::JOB_STATE_RUNNING});
  ASSERT_TRUE(running.ok());
  EXPECT_TRUE(running->empty());

  absl::StatusOr<v1::GetPlanResponse> plan = client_->GetPlan(submitted->job_id());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GT(plan->plan().tasks_size(), 0);
  EXPECT_EQ(plan->node_plans_size(), 1);
}

TEST_F(ClusterClientTest, ListJobsGathersEveryPage) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<v1::JobInfo> submitted = client_->SubmitJob(TrainingJob(1));
    ASSERT_TRUE(submitted.ok()) << submitted.status();
    ids.push_back(submitted->job_id());
  }
  ClusterClientOptions options;
  options.list_page_size = 2;
  absl::StatusOr<std::unique_ptr<ClusterClient>> paging =
      ClusterClient::Connect(daemon_->address(), options);
  ASSERT_TRUE(paging.ok()) << paging.status();
  absl::StatusOr<std::vector<v1::JobInfo>> jobs = (*paging)->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  std::vector<std::string> listed;
  for (const v1::JobInfo& job : *jobs) listed.push_back(job.job_id());
  EXPECT_EQ(listed, ids);
}

TEST_F(ClusterClientTest, ARejectedJobIsInvalidArgumentNamingTheOp) {
  absl::StatusOr<job::Job> job =
      compiler::ReadJobFile(LOOM_SOURCE_DIR "/tests/tools/loomctl/jobs/shape_mismatch.pbtxt");
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<v1::JobInfo> submitted = client_->SubmitJob(*job);
  EXPECT_EQ(submitted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(submitted.status().message(), HasSubstr("op 'project'"));
}

TEST_F(ClusterClientTest, UnknownJobsAreNotFound) {
  EXPECT_EQ(client_->GetJob("job-999").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->CancelJob("job-999").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->GetPlan("job-999").status().code(), absl::StatusCode::kNotFound);
  absl::Status watched = client_->WatchJob("job-999", [](const v1::JobEvent&) {});
  EXPECT_EQ(watched.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(watched.message(), HasSubstr("job-999"));
}

TEST_F(ClusterClientTest, CancellingAFinishedJobIsFailedPrecondition) {
  absl::StatusOr<v1::JobInfo> submitted = client_->SubmitJob(TrainingJob(1));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  Watch(submitted->job_id());
  absl::StatusOr<v1::JobInfo> cancelled = client_->CancelJob(submitted->job_id(), "too late");
  EXPECT_EQ(cancelled.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ClusterClientTest, CancelsARunningJobWithTheReason) {
  absl::StatusOr<v1::JobInfo> submitted = client_->SubmitJob(SlowJob(100000, 1000));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  ASSERT_TRUE(WaitForState(submitted->job_id(), v1::JOB_STATE_RUNNING));
  absl::StatusOr<v1::JobInfo> cancelled = client_->CancelJob(submitted->job_id(), "enough");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(cancelled->error().message(), HasSubstr("enough"));
  // Cancelling it again succeeds.
  EXPECT_TRUE(client_->CancelJob(submitted->job_id()).ok());
}

TEST_F(ClusterClientTest, AWatchIsCancelledFromAnotherThread) {
  absl::StatusOr<v1::JobInfo> submitted = client_->SubmitJob(SlowJob(100000, 1000));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  WatchCancellation cancellation;
  std::atomic<int> events{0};
  absl::Status watched;
  std::thread watcher([&] {
    WatchOptions options;
    options.cancellation = &cancellation;
    options.timeout = absl::Seconds(60);
    watched = client_->WatchJob(
        submitted->job_id(), [&events](const v1::JobEvent&) { ++events; }, options);
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (events.load() < 3 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_GE(events.load(), 3);
  cancellation.Cancel();
  watcher.join();
  EXPECT_EQ(watched.code(), absl::StatusCode::kCancelled) << watched;
  // The job itself goes on until cancelled.
  absl::StatusOr<v1::JobInfo> job = client_->GetJob(submitted->job_id());
  ASSERT_TRUE(job.ok());
  EXPECT_FALSE(IsTerminal(job->state()));
  EXPECT_TRUE(client_->CancelJob(submitted->job_id()).ok());

  // Cancelled before it began: returns at once.
  WatchCancellation early;
  early.Cancel();
  WatchOptions options;
  options.cancellation = &early;
  EXPECT_EQ(client_
                ->WatchJob(
                    submitted->job_id(), [](const v1::JobEvent&) {}, options)
                .code(),
            absl::StatusCode::kCancelled);
}

TEST_F(ClusterClientTest, AWatchHasADeadline) {
  absl::StatusOr<v1::JobInfo> submitted = client_->SubmitJob(SlowJob(100000, 1000));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  WatchOptions options;
  options.timeout = absl::Milliseconds(300);
  absl::Status watched = client_->WatchJob(
      submitted->job_id(), [](const v1::JobEvent&) {}, options);
  EXPECT_EQ(watched.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(watched.message(), HasSubstr(daemon_->address()));
  EXPECT_TRUE(client_->CancelJob(submitted->job_id()).ok());
}

TEST_F(ClusterClientTest, AQuietWatchOutlastsItsKeepalivePings) {
  // Steps of 1.5 s: the watch receives nothing for that long while the client pings every
  // 100 ms. gRPC servers by default answer a third ping that came without data within 5 minutes
  // with GOAWAY (too many pings), which would end the watch; loomd accepts any rate.
  ClusterClientOptions options;
  options.keepalive_interval = absl::Milliseconds(100);
  options.keepalive_timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<ClusterClient>> pinging =
      ClusterClient::Connect(daemon_->address(), options);
  ASSERT_TRUE(pinging.ok()) << pinging.status();
  absl::StatusOr<v1::JobInfo> submitted = (*pinging)->SubmitJob(SlowJob(2, 1'500'000));
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  int steps = 0;
  absl::Status watched = (*pinging)->WatchJob(
      submitted->job_id(), [&steps](const v1::JobEvent& event) { steps += event.has_step(); },
      WatchOptions{.timeout = absl::Seconds(30)});
  EXPECT_TRUE(watched.ok()) << watched;
  EXPECT_EQ(steps, 2);
}

TEST_F(ClusterClientTest, ListsTheNodeAndWaitsUntilReady) {
  absl::StatusOr<std::vector<v1::NodeInfo>> nodes = client_->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_TRUE((*nodes)[0].coordinator());
  EXPECT_EQ((*nodes)[0].devices_size(), 2);
  EXPECT_TRUE(client_->CheckHealth().ok());
  EXPECT_TRUE(client_->CheckHealth("loom.v1.JobService").ok());

  EXPECT_TRUE(client_->WaitUntilReady(1, absl::Now() + absl::Seconds(5)).ok());
  absl::Status two = client_->WaitUntilReady(2, absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(two.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(two.message(), HasSubstr("1 of 2 nodes ready"));
}

TEST_F(ClusterClientTest, AShuttingDownDaemonIsNotReady) {
  daemon_->Shutdown(absl::ZeroDuration());
  // The server is gone: the health check fails, naming the address.
  absl::Status health = client_->CheckHealth();
  EXPECT_FALSE(health.ok());
  EXPECT_THAT(health.message(), HasSubstr(daemon_->address()));
}

TEST(ClusterClientConnectTest, NoDaemonIsUnavailableNamingTheAddress) {
  const std::string address = absl::StrCat("127.0.0.1:", UnusedPort());
  ClusterClientOptions options;
  options.connect_timeout = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<ClusterClient>> client = ClusterClient::Connect(address, options);
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(client.status().message(), HasSubstr(address));
}

TEST(ClusterClientConnectTest, AnAddressWithoutAPortIsInvalid) {
  EXPECT_EQ(ClusterClient::Connect("localhost").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(JobStateNamesTest, ParseAndName) {
  EXPECT_EQ(JobStateName(v1::JOB_STATE_RUNNING), "RUNNING");
  for (const char* text : {"running", "RUNNING", "JOB_STATE_RUNNING"}) {
    absl::StatusOr<v1::JobState> state = ParseJobState(text);
    ASSERT_TRUE(state.ok()) << text;
    EXPECT_EQ(*state, v1::JOB_STATE_RUNNING);
  }
  absl::StatusOr<v1::JobState> bad = ParseJobState("finished");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("succeeded"));
  EXPECT_FALSE(ParseJobState("unspecified").ok());
  EXPECT_EQ(NodeStateName(v1::NODE_STATE_MISSING), "MISSING");
  EXPECT_TRUE(IsTerminal(v1::JOB_STATE_CANCELLED));
  EXPECT_FALSE(IsTerminal(v1::JOB_STATE_RUNNING));
}

}  // namespace
}  // namespace loom
