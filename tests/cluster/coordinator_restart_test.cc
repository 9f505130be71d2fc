// A coordinator that dies (SIGKILL, mid-job) or stops (SIGTERM) and is started again on the same
// address gets its workers back: they rejoin under their ranks within 3 s, and a job
// across every node then runs to SUCCEEDED (its id, job-1 again, collides with the job the old
// coordinator was running on the workers: their reports about the old one must not leak into it).
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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
           "--node-rank", absl::StrCat(rank), "--coordinator", coordinator_->address()},
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

  // Stops the coordinator with `signal`, starts it again on its address after `downtime`, and
  // expects the workers back under their ranks and a job across the three nodes to succeed.
  void ExpectWorkersRejoinAfterRestart(int signal, absl::Duration downtime = absl::Seconds(1)) {
    const std::string address = coordinator_->address();
    coordinator_->Signal(signal);
    coordinator_.reset();
    // The workers lose their session and retry meanwhile.
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
  absl::StatusOr<std::string> id = client_->Submit(PipelineJob(100000));
  ASSERT_TRUE(id.ok()) << id.status();
  const absl::Time submitted = absl::Now();
  while (client_->Get(*id).steps_done() < 1 && absl::Now() - submitted < absl::Seconds(60)) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_GE(client_->Get(*id).steps_done(), 1);
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
  absl::StatusOr<std::string> killed = client_->Submit(PipelineJob(100000));
  ASSERT_TRUE(killed.ok()) << killed.status();
  const absl::Time submitted = absl::Now();
  while (client_->Get(*killed).steps_done() < 1 && absl::Now() - submitted < absl::Seconds(60)) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  const int64_t steps_done = client_->Get(*killed).steps_done();
  ASSERT_GE(steps_done, 1);
  // A running job's progress is written at least every second.
  absl::SleepFor(absl::Milliseconds(1500));

  coordinator_->Signal(SIGKILL);
  coordinator_.reset();
  StartCoordinator(address, {"--data-dir", data_directory});
  ASSERT_NE(coordinator_, nullptr);
  const v1::JobInfo info = client_->Get(*killed);
  EXPECT_EQ(info.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(info.error().message(),
              ::testing::HasSubstr("was running when the coordinator stopped, and did not finish"));
  EXPECT_GE(info.steps_done(), steps_done);
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

}  // namespace
}  // namespace loom::testing
