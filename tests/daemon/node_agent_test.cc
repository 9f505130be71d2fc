// A node's agent whose reporter refuses an update as too large for the coordinator (the session's
// message limit): the job ends on the node with that reason, reported to the coordinator, instead
// of running on with the coordinator waiting for pieces that never come.
#include "daemon/node_agent.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
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

  // The first update of `kind` (within 20 s); nullopt if none came.
  std::optional<v1::NodeJobUpdate> WaitFor(v1::NodeJobUpdate::KindCase kind) {
    std::unique_lock<std::mutex> lock(mutex_);
    std::optional<v1::NodeJobUpdate> found;
    changed_.wait_for(lock, std::chrono::seconds(20), [&] {
      for (const v1::NodeJobUpdate& update : updates_) {
        if (update.kind_case() == kind) {
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

}  // namespace
}  // namespace loom::daemon
