// A coordinator that dies (SIGKILL, mid-job) or stops (SIGTERM) and is started again on the same
// address gets its workers back: they rejoin under their ranks within 3 s, and a job
// across every node then runs to SUCCEEDED (its id, job-1 again, collides with the job the old
// coordinator was running on the workers: their reports about the old one must not leak into it).
// A coordinator with workers exits within seconds of SIGTERM, and workers notice a coordinator that
// stopped answering (SIGSTOP) through keepalive within their --node-timeout, as does a
// ClusterClient watching a job (within its keepalive interval and timeout).
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/cluster_client.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tests/cluster/loomd_client.h"
#include "tests/cluster/loomd_process.h"

namespace loom::testing {
namespace {

// Data parallel on the two workers, each step sleeping `microseconds` (an act that an abort does
// not cut short).
job::Job SlowJobOnTheWorkers(int64_t microseconds) {
  job::Job job;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"pb(
        name: "slow_on_workers"
        placement { devices: [ "node1/cpu:0", "node2/cpu:0" ] }
        optimizer { sgd { learning_rate: 0.01 } }
        loss: "loss"
        num_steps: 1000
        inputs {
          name: "x"
          shape: [ 8, 4 ]
          sbp: "S(0)"
          random_normal { std: 1 seed: 1 }
        }
        variables {
          name: "w"
          shape: [ 4, 2 ]
          initializer { normal { std: 0.5 seed: 2 } }
        }
        ops {
          name: "y"
          type: "matmul"
          inputs: [ "x", "w" ]
          outputs: "y"
        }
        ops { name: "slept" type: "sleep" inputs: "y" outputs: "slept" }
        ops { name: "loss" type: "reduce_mean" inputs: "slept" outputs: "loss" }
      )pb",
      &job));
  for (job::Op& op : *job.mutable_ops()) {
    if (op.type() == "sleep")
      (*op.mutable_attributes())["microseconds"].set_int_value(microseconds);
  }
  return job;
}

// How long workers may take to rejoin a restarted coordinator: they retry every second (however
// long it was away), and registering takes milliseconds.
constexpr absl::Duration kRejoinBound = absl::Seconds(3);

class CoordinatorRestartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_prefix_ = absl::StrCat(::testing::TempDir(), "/coordinator-restart-", getpid(), "-");
    StartCoordinator("127.0.0.1:0");
    ASSERT_NE(coordinator_, nullptr);
    for (int rank = 1; rank <= 2; ++rank) {
      auto worker = LoomdProcess::Start(
          LOOMD_BINARY,
          {"--verbose", "--devices", "cpu:1", "--node-name", absl::StrCat("node-", rank),
           "--node-rank", absl::StrCat(rank), "--coordinator", coordinator_->address(),
           "--heartbeat-interval", "200ms", "--node-timeout", "2s"},
          absl::StrCat(log_prefix_, "worker-", rank, ".log"));
      ASSERT_TRUE(worker.ok()) << worker.status();
      workers_.push_back(*std::move(worker));
    }
    ASSERT_TRUE(client_->WaitForReadyNodes(3, absl::Seconds(20))) << coordinator_->Log();
  }

  void TearDown() override {
    if (HasFailure()) {
      if (coordinator_ != nullptr) std::cerr << coordinator_->Log() << "\n";
      for (auto& worker : workers_) std::cerr << worker->Log() << "\n";
    }
    for (auto& worker : workers_) worker->Signal(SIGTERM);
    if (coordinator_ != nullptr) coordinator_->Signal(SIGTERM);
  }

  void StartCoordinator(const std::string& listen_address,
                        const std::vector<std::string>& more_arguments = {}) {
    LoomdProcess::Options options;
    options.binary = LOOMD_BINARY;
    options.listen_address = listen_address;
    options.arguments = {"--verbose", "--devices",
                         "cpu:1",     "--node-name",
                         "node-0",    "--heartbeat-interval",
                         "200ms",     "--node-timeout",
                         "2s",        "--shutdown-grace",
                         "1s"};
    options.arguments.insert(options.arguments.end(), more_arguments.begin(), more_arguments.end());
    options.log_path = absl::StrCat(log_prefix_, "coordinator-", ++coordinator_starts_, ".log");
    auto coordinator = LoomdProcess::Start(options);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    client_ = std::make_unique<LoomdClient>(coordinator_->address());
  }

  // A three-stage pipeline, one stage per node.
  static job::Job PipelineJob(int64_t steps) {
    gpt::GptConfig config = SmallGpt(steps);
    config.pipeline_stages = 3;
    config.micro_batches = 3;
    config.devices_per_node = 1;
    absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }

  // Submits a long pipeline job and waits (up to 60 s) for its first step; its id, or empty
  // with the test failed.
  std::string SubmitALongJobAndAwaitAStep(const std::string& checkpoint_path = "") {
    absl::StatusOr<std::string> id = client_->Submit(PipelineJob(100000), checkpoint_path);
    EXPECT_TRUE(id.ok()) << id.status();
    if (!id.ok()) return "";
    const absl::Time submitted = absl::Now();
    while (client_->Get(*id).steps_done() < 1 && absl::Now() - submitted < absl::Seconds(60)) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_GE(client_->Get(*id).steps_done(), 1);
    return HasFailure() ? "" : *id;
  }

  // Stops the coordinator with `signal`, starts it again on its address after `downtime`, and
  // expects the workers back under their ranks and a job across the three nodes to succeed.
  void ExpectWorkersRejoinAfterRestart(int signal, absl::Duration downtime = absl::Seconds(1)) {
    const std::string address = coordinator_->address();
    coordinator_->Signal(signal);
    coordinator_.reset();
    // The workers lose their session and retry meanwhile. A call to a worker, which it forwards
    // to the coordinator, says that it is down and where it was.
    auto worker = v1::ClusterService::NewStub(LoomdClient(workers_[0]->address()).channel());
    v1::ListNodesResponse listed;
    grpc::Status status = worker->ListNodes(LoomdClient::Context().get(), {}, &listed);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
    EXPECT_THAT(
        status.error_message(),
        ::testing::HasSubstr(absl::StrCat(
            "this loomd is a worker: it forwarded the call to its coordinator at ", address)));
    absl::SleepFor(downtime);
    for (auto& worker : workers_) ASSERT_TRUE(worker->Running()) << worker->Log();

    StartCoordinator(address);
    ASSERT_NE(coordinator_, nullptr);
    const absl::Time restarted = absl::Now();
    ASSERT_TRUE(client_->WaitForReadyNodes(3, kRejoinBound))
        << "the workers did not rejoin within " << kRejoinBound << "\n"
        << coordinator_->Log();
    const absl::Duration to_rejoin = absl::Now() - restarted;
    std::cerr << "workers rejoined " << to_rejoin << " after the restart\n";
    std::vector<v1::NodeInfo> nodes = client_->Nodes();
    ASSERT_EQ(nodes.size(), 3u);
    for (int index = 0; index < 3; ++index) {
      EXPECT_EQ(nodes[index].index(), index);
      EXPECT_EQ(nodes[index].name(), absl::StrCat("node-", index));
      EXPECT_EQ(nodes[index].state(), v1::NODE_STATE_READY);
    }

    absl::StatusOr<std::string> id = client_->Submit(PipelineJob(3));
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(*id, "job-1");  // the new coordinator's first
    JobOutcome outcome = client_->Watch(*id);
    EXPECT_EQ(outcome.state, v1::JOB_STATE_SUCCEEDED) << outcome.error;
    EXPECT_EQ(outcome.losses.size(), 3u);
  }

  std::string log_prefix_;
  int coordinator_starts_ = 0;
  std::unique_ptr<LoomdProcess> coordinator_;
  std::vector<std::unique_ptr<LoomdProcess>> workers_;
  std::unique_ptr<LoomdClient> client_;
};

TEST_F(CoordinatorRestartTest, WorkersRejoinACoordinatorKilledMidJob) {
  ASSERT_FALSE(SubmitALongJobAndAwaitAStep().empty());
  ExpectWorkersRejoinAfterRestart(SIGKILL);
}

TEST_F(CoordinatorRestartTest, WithADataDirTheJobKilledMidRunIsFailedAndIdsGoOn) {
  const std::string data_directory = absl::StrCat(log_prefix_, "data");
  const std::string address = coordinator_->address();
  coordinator_->Signal(SIGTERM);
  coordinator_.reset();
  StartCoordinator(address, {"--data-dir", data_directory});
  ASSERT_NE(coordinator_, nullptr);
  ASSERT_TRUE(client_->WaitForReadyNodes(3, absl::Seconds(20))) << coordinator_->Log();
  const std::string checkpoint = absl::StrCat(log_prefix_, "model.safetensors");
  const std::string killed = SubmitALongJobAndAwaitAStep(checkpoint);
  ASSERT_FALSE(killed.empty());
  const int64_t steps_done = client_->Get(killed).steps_done();
  // A running job's progress is written at least every second.
  absl::SleepFor(absl::Milliseconds(1500));

  coordinator_->Signal(SIGKILL);
  coordinator_.reset();
  // What a save cut short by the kill can leave next to the checkpoint (the killed daemon removes
  // nothing), and a file of the user's that only looks alike.
  const std::vector<std::string> leftovers = {absl::StrCat(checkpoint, ".node-0"),
                                              absl::StrCat(checkpoint, ".step-40.node-2"),
                                              absl::StrCat(checkpoint, ".tmp.123.0")};
  const std::string notes = absl::StrCat(checkpoint, ".notes");
  for (const std::string& file : leftovers) std::ofstream(file) << "part";
  std::ofstream(notes) << "mine";
  StartCoordinator(address, {"--data-dir", data_directory});
  ASSERT_NE(coordinator_, nullptr);
  const v1::JobInfo info = client_->Get(killed);
  EXPECT_EQ(info.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(info.error().message(),
              ::testing::HasSubstr("was running when the coordinator stopped, and did not finish"));
  EXPECT_GE(info.steps_done(), steps_done);
  for (const std::string& file : leftovers) {
    EXPECT_FALSE(std::filesystem::exists(file)) << file << " is left after the restart";
  }
  EXPECT_TRUE(std::filesystem::exists(notes));
  ASSERT_TRUE(client_->WaitForReadyNodes(3, kRejoinBound)) << coordinator_->Log();
  absl::StatusOr<std::string> next = client_->Submit(PipelineJob(2));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*next, "job-2");
  JobOutcome outcome = client_->Watch(*next);
  EXPECT_EQ(outcome.state, v1::JOB_STATE_SUCCEEDED) << outcome.error;
}

TEST_F(CoordinatorRestartTest, TheOldCoordinatorsJobEndingLateDoesNotFailTheNewOnes) {
  // The workers are in a 6 s act of the old coordinator's job-1 when it dies: their part of it
  // ends only when the act does, after they have rejoined and the new coordinator launched its own
  // job-1. That end is no news for the new coordinator.
  absl::StatusOr<std::string> id = client_->Submit(SlowJobOnTheWorkers(6'000'000));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_EQ(*id, "job-1");
  const absl::Time submitted = absl::Now();
  while (client_->Get(*id).state() != v1::JOB_STATE_RUNNING &&
         absl::Now() - submitted < absl::Seconds(30)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(client_->Get(*id).state(), v1::JOB_STATE_RUNNING);
  absl::SleepFor(absl::Milliseconds(500));
  ExpectWorkersRejoinAfterRestart(SIGKILL, absl::ZeroDuration());
}

TEST_F(CoordinatorRestartTest, WorkersRejoinACoordinatorStoppedWithSigterm) {
  ExpectWorkersRejoinAfterRestart(SIGTERM);
}

TEST_F(CoordinatorRestartTest, WorkersRejoinWithinSecondsACoordinatorAwayForLong) {
  // Long enough for gRPC's default reconnection backoff (1 s growing 1.6 times per attempt, up
  // to 2 minutes) to leave the workers waiting for several seconds after the restart.
  ExpectWorkersRejoinAfterRestart(SIGKILL, absl::Seconds(12));
}

TEST_F(CoordinatorRestartTest, WorkersRejoinACoordinatorRestartedTwice) {
  ExpectWorkersRejoinAfterRestart(SIGKILL);
  ExpectWorkersRejoinAfterRestart(SIGKILL);
}

TEST_F(CoordinatorRestartTest, ACoordinatorWithWorkersExitsPromptlyOnSigterm) {
  // No job runs, so nothing should hold it up; its workers' sessions are open, and their handlers
  // wait in reads that only the workers or a cancellation end (gRPC's shutdown deadline is 5 s).
  const absl::Time signalled = absl::Now();
  const int status = coordinator_->Signal(SIGTERM);
  const absl::Duration took = absl::Now() - signalled;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "wait status " << status;
  EXPECT_LT(took, absl::Seconds(3)) << coordinator_->Log();
  // Its own shutdown ends the workers' sessions: no warning that they were lost.
  for (absl::string_view line : absl::StrSplit(coordinator_->Log(), '\n')) {
    EXPECT_FALSE(absl::StartsWith(line, "W") && absl::StrContains(line, "was lost")) << line;
  }
  std::cerr << "the coordinator exited " << took << " after SIGTERM\n";
  coordinator_.reset();
}

// Whether every worker's log says it lost its session with the coordinator.
bool EveryWorkerLostItsCoordinator(const std::vector<std::unique_ptr<LoomdProcess>>& workers) {
  for (const auto& worker : workers) {
    if (worker->Log().find("lost the session with the coordinator") == std::string::npos) {
      return false;
    }
  }
  return true;
}

TEST_F(CoordinatorRestartTest, SessionsOutlastTheWorkersKeepalivePings) {
  // A ping every 200 ms from each worker while the coordinator sends nothing on the sessions:
  // gRPC servers by default close such a connection (GOAWAY, too many pings) unless data from the
  // client keeps resetting their count, as the heartbeats do; the coordinator accepts any rate.
  absl::SleepFor(absl::Seconds(3));
  for (auto& worker : workers_) {
    EXPECT_THAT(worker->Log(), ::testing::Not(::testing::HasSubstr("lost the session")));
  }
  std::vector<v1::NodeInfo> nodes = client_->Nodes();
  ASSERT_EQ(nodes.size(), 3u);
  for (const v1::NodeInfo& node : nodes) EXPECT_EQ(node.state(), v1::NODE_STATE_READY);
}

TEST_F(CoordinatorRestartTest, WorkersLeaveACoordinatorThatStopsAnswering) {
  // A stopped coordinator keeps its connections open (the kernel still acknowledges the
  // heartbeats), so only the workers' keepalive pings, unanswered, show that it is gone: every
  // 200 ms, lost after 2 s without an answer.
  const std::string id = SubmitALongJobAndAwaitAStep();
  ASSERT_FALSE(id.empty());
  // A client watching the job, pinging every 200 ms, gives up on a ping unanswered for 1 s. (The
  // watch's own deadline is only a safety net: the test fails when it is what ended the watch.)
  ClusterClientOptions client_options;
  client_options.keepalive_interval = absl::Milliseconds(200);
  client_options.keepalive_timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<ClusterClient>> watcher =
      ClusterClient::Connect(coordinator_->address(), client_options);
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  absl::Status watched;
  absl::Time watch_ended;
  std::thread watch([&] {
    watched = (*watcher)->WatchJob(
        id, [](const v1::JobEvent&) {}, WatchOptions{.timeout = absl::Seconds(20)});
    watch_ended = absl::Now();
  });
  absl::SleepFor(absl::Milliseconds(500));  // the watch is under way, with pings answered

  coordinator_->Signal(SIGSTOP);
  const absl::Time stopped = absl::Now();
  bool lost = false;
  while (!(lost = EveryWorkerLostItsCoordinator(workers_)) &&
         absl::Now() - stopped < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  const absl::Duration to_notice = absl::Now() - stopped;
  watch.join();
  coordinator_->Signal(SIGCONT);
  EXPECT_EQ(watched.code(), absl::StatusCode::kUnavailable) << watched;
  std::cerr << "the watching client noticed " << watch_ended - stopped
            << " after the coordinator stopped: " << watched << "\n";
  EXPECT_LT(watch_ended - stopped, absl::Seconds(5));
  ASSERT_TRUE(lost) << "the workers did not notice within 10 s that the coordinator stopped";
  std::cerr << "the workers noticed " << to_notice << " after the coordinator stopped\n";
  EXPECT_LT(to_notice, absl::Seconds(5));
  for (auto& worker : workers_) ASSERT_TRUE(worker->Running()) << worker->Log();

  // Resumed, the coordinator finds its workers gone, fails their job, and gets them back.
  JobOutcome outcome = client_->Watch(id, absl::Seconds(30));
  EXPECT_EQ(outcome.state, v1::JOB_STATE_FAILED);
  EXPECT_THAT(outcome.error, ::testing::HasSubstr("lost"));
  ASSERT_TRUE(client_->WaitForReadyNodes(3, absl::Seconds(10))) << coordinator_->Log();
  absl::StatusOr<std::string> next = client_->Submit(PipelineJob(2));
  ASSERT_TRUE(next.ok()) << next.status();
  JobOutcome after = client_->Watch(*next);
  EXPECT_EQ(after.state, v1::JOB_STATE_SUCCEEDED) << after.error;
}

}  // namespace
}  // namespace loom::testing
