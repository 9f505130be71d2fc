// A node's agent whose reporter refuses an update as too large for the coordinator (the session's
// message limit): the job ends on the node with that reason, reported to the coordinator, instead
// of running on with the coordinator waiting for pieces that never come. And an agent whose job's
// part does not end when it is released (a kernel that never returns, played by a "sleep" kernel
// that waits for the test): it reports itself unhealthy after the release timeout, healthy again
// once the part ended, and its Stop returns within its bound meanwhile.
#include "daemon/node_agent.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "daemon/job_admission.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/device_backends.h"
#include "tests/daemon/daemon_test_util.h"

namespace loom::daemon {
namespace {

using ::testing::HasSubstr;

// What the agent reported, and a way to wait for it.
class Reports {
 public:
  absl::Status Add(const v1::NodeJobUpdate& update) {
    std::lock_guard<std::mutex> lock(mutex_);
    updates_.push_back(update);
    changed_.notify_all();
    if (update.has_piece()) {
      return absl::ResourceExhaustedError("the piece is over the test's limit");
    }
    return absl::OkStatus();
  }

  // The first update of `kind` (within 20 s), of job `job_id` unless empty; nullopt if none came.
  std::optional<v1::NodeJobUpdate> WaitFor(v1::NodeJobUpdate::KindCase kind,
                                           const std::string& job_id = "") {
    std::unique_lock<std::mutex> lock(mutex_);
    std::optional<v1::NodeJobUpdate> found;
    changed_.wait_for(lock, std::chrono::seconds(20), [&] {
      for (const v1::NodeJobUpdate& update : updates_) {
        if (update.kind_case() == kind && (job_id.empty() || update.job_id() == job_id)) {
          found = update;
          return true;
        }
      }
      return false;
    });
    return found;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<v1::NodeJobUpdate> updates_;
};

TEST(NodeAgentTest, AForwardedPieceTheReporterRefusesEndsTheJobWithTheReason) {
  KernelRegistry kernels;
  ASSERT_TRUE(RegisterAllKernels(&kernels).ok());
  job::Job job = testing::CountingJob(3, "ones_total", "ones_per_column");
  compiler::DeviceSet devices = compiler::DeviceSet::Cpus(2, 1);
  absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> compiled = AdmitJob(job, devices);
  ASSERT_TRUE(compiled.ok()) << compiled.status();

  Reports reports;
  NodeAgent agent(&kernels, [&](const v1::NodeJobUpdate& update) { return reports.Add(update); });
  v1::NodeCommand launch;
  launch.set_job_id("job-1");
  *launch.mutable_launch()->mutable_plan() = (*compiled)->result.node_plans[0];
  for (const plan::Fetch& fetch : (*compiled)->result.plan.fetches()) {
    for (const std::string& sink : fetch.sinks()) launch.mutable_launch()->add_forward_sinks(sink);
  }
  agent.Handle(launch);
  std::optional<v1::NodeJobUpdate> launched = reports.WaitFor(v1::NodeJobUpdate::kLaunched);
  ASSERT_TRUE(launched.has_value());

  v1::NodeCommand connect;
  connect.set_job_id("job-1");
  (*connect.mutable_connect()->mutable_addresses())[0] = launched->launched().address();
  agent.Handle(connect);
  ASSERT_TRUE(reports.WaitFor(v1::NodeJobUpdate::kConnected).has_value());
  v1::NodeCommand start;
  start.set_job_id("job-1");
  start.mutable_start();
  agent.Handle(start);

  std::optional<v1::NodeJobUpdate> ended = reports.WaitFor(v1::NodeJobUpdate::kEnded);
  ASSERT_TRUE(ended.has_value()) << "the job did not end";
  EXPECT_EQ(ended->ended().code(), static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(ended->ended().message(), HasSubstr("the piece is over the test's limit"));
}

// Where the test's "sleep" kernel waits: every act enters and waits until the test opens it.
class Gate {
 public:
  void Enter() {
    std::unique_lock<std::mutex> lock(mutex_);
    ++entered_;
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
  }
  bool WaitEntered() {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(20), [this] { return entered_ > 0; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int entered_ = 0;
  bool open_ = false;
};

// A "sleep" that ignores every abort (as a kernel stuck in a system call would) until the gate
// opens, then copies its input to its output.
class StuckSleepKernel : public Kernel {
 public:
  explicit StuckSleepKernel(std::shared_ptr<Gate> gate) : gate_(std::move(gate)) {}
  absl::Status Compute(const KernelContext& context) override {
    gate_->Enter();
    if (!context.inputs.empty() && !context.outputs.empty()) {
      const TensorView& input = context.inputs[0];
      const TensorView& output = context.outputs[0];
      if (input.ByteSize() == output.ByteSize() && input.data != output.data &&
          input.data != nullptr && output.data != nullptr) {
        std::memcpy(output.data, input.data, input.ByteSize());
      }
    }
    return absl::OkStatus();
  }

 private:
  std::shared_ptr<Gate> gate_;
};

// The health changes the agent announced, and a way to wait for them.
class HealthChanges {
 public:
  void Add(const absl::Status& health) {
    std::lock_guard<std::mutex> lock(mutex_);
    changes_.push_back(health);
    changed_.notify_all();
  }
  // Waits (up to 20 s) until `count` changes were announced; the last one, or nullopt.
  std::optional<absl::Status> WaitForChange(size_t count) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, std::chrono::seconds(20),
                           [&] { return changes_.size() >= count; })) {
      return std::nullopt;
    }
    return changes_[count - 1];
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return changes_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<absl::Status> changes_;
};

class StuckPartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterAllKernels(&all_kernels_).ok());
    for (const std::string& op : all_kernels_.OpTypes(plan::CPU)) {
      KernelFactory factory;
      if (op == "sleep") {
        factory = [gate = gate_](const KernelInit&) -> absl::StatusOr<std::unique_ptr<Kernel>> {
          return std::make_unique<StuckSleepKernel>(gate);
        };
      } else {
        factory = [this](const KernelInit& init) { return all_kernels_.Create(plan::CPU, init); };
      }
      ASSERT_TRUE(kernels_.Register(op, plan::CPU, std::move(factory)).ok());
    }
    absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> compiled =
        AdmitJob(testing::SlowJob(1, 1), compiler::DeviceSet::Cpus(2, 1));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    plan_ = (*compiled)->result.node_plans[0];
  }

  NodeAgentOptions Options() {
    NodeAgentOptions options;
    options.release_timeout = absl::Milliseconds(300);
    options.health_changed = [this](const absl::Status& health) { changes_.Add(health); };
    return options;
  }

  // Launches `job_id` on `agent`, connects it (alone) and, with `start`, starts it.
  void Launch(NodeAgent& agent, const std::string& job_id, bool start) {
    v1::NodeCommand launch;
    launch.set_job_id(job_id);
    *launch.mutable_launch()->mutable_plan() = plan_;
    agent.Handle(launch);
    std::optional<v1::NodeJobUpdate> launched =
        reports_.WaitFor(v1::NodeJobUpdate::kLaunched, job_id);
    ASSERT_TRUE(launched.has_value()) << job_id << " did not launch";
    if (!start) return;
    v1::NodeCommand connect;
    connect.set_job_id(job_id);
    (*connect.mutable_connect()->mutable_addresses())[0] = launched->launched().address();
    agent.Handle(connect);
    ASSERT_TRUE(reports_.WaitFor(v1::NodeJobUpdate::kConnected, job_id).has_value());
    v1::NodeCommand command;
    command.set_job_id(job_id);
    command.mutable_start();
    agent.Handle(command);
  }

  // The coordinator's end of a cancelled job: abort, then release.
  static void AbortAndRelease(NodeAgent& agent, const std::string& job_id) {
    v1::NodeCommand abort;
    abort.set_job_id(job_id);
    abort.mutable_abort()->set_reason("cancelled by the test");
    agent.Handle(abort);
    v1::NodeCommand release;
    release.set_job_id(job_id);
    release.mutable_release();
    agent.Handle(release);
  }

  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
  KernelRegistry all_kernels_;
  KernelRegistry kernels_;
  plan::Plan plan_;
  Reports reports_;
  HealthChanges changes_;
};

TEST_F(StuckPartTest, APartThatDoesNotEndAfterItsReleaseMakesTheAgentUnhealthyUntilItEnds) {
  NodeAgent agent(
      &kernels_, [this](const v1::NodeJobUpdate& update) { return reports_.Add(update); },
      Options());
  ASSERT_NO_FATAL_FAILURE(Launch(agent, "job-1", /*start=*/true));
  ASSERT_TRUE(gate_->WaitEntered());
  AbortAndRelease(agent, "job-1");
  EXPECT_TRUE(agent.health().ok()) << "unhealthy before the release timeout";

  std::optional<absl::Status> unhealthy = changes_.WaitForChange(1);
  ASSERT_TRUE(unhealthy.has_value()) << "the agent never said it was unhealthy";
  EXPECT_EQ(unhealthy->code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(unhealthy->message(), HasSubstr("job-1"));
  EXPECT_THAT(unhealthy->message(), HasSubstr("--release-timeout"));
  EXPECT_EQ(agent.health().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(agent.busy());

  // The part ends: healthy again, and the node takes the next job.
  gate_->Open();
  std::optional<absl::Status> healthy = changes_.WaitForChange(2);
  ASSERT_TRUE(healthy.has_value()) << "the agent never said it was healthy again";
  EXPECT_TRUE(healthy->ok()) << *healthy;
  EXPECT_TRUE(agent.health().ok());
  ASSERT_NO_FATAL_FAILURE(Launch(agent, "job-2", /*start=*/false));
  EXPECT_EQ(changes_.count(), 2u);
}

TEST_F(StuckPartTest, AnAbortedPartThatEndsInTimeKeepsTheAgentHealthy) {
  gate_->Open();  // the "sleep" returns at once: the job ends on its own
  NodeAgent agent(
      &kernels_, [this](const v1::NodeJobUpdate& update) { return reports_.Add(update); },
      Options());
  ASSERT_NO_FATAL_FAILURE(Launch(agent, "job-1", /*start=*/true));
  ASSERT_TRUE(reports_.WaitFor(v1::NodeJobUpdate::kEnded, "job-1").has_value());
  AbortAndRelease(agent, "job-1");
  ASSERT_NO_FATAL_FAILURE(Launch(agent, "job-2", /*start=*/false));
  absl::SleepFor(absl::Milliseconds(600));  // twice the release timeout
  EXPECT_TRUE(agent.health().ok()) << agent.health();
  EXPECT_EQ(changes_.count(), 0u);
}

TEST_F(StuckPartTest, StopReturnsWithinItsBoundWhileAPartDoesNotEnd) {
  NodeAgent agent(
      &kernels_, [this](const v1::NodeJobUpdate& update) { return reports_.Add(update); },
      Options());
  ASSERT_NO_FATAL_FAILURE(Launch(agent, "job-1", /*start=*/true));
  ASSERT_TRUE(gate_->WaitEntered());
  const absl::Time stop = absl::Now();
  EXPECT_FALSE(agent.Stop(absl::Milliseconds(200)));
  EXPECT_LT(absl::Now() - stop, absl::Seconds(2));
  // Once the part ends, a second Stop joins everything (the agent may then be destroyed).
  gate_->Open();
  EXPECT_TRUE(agent.Stop(absl::Seconds(20)));
}

}  // namespace
}  // namespace loom::daemon
