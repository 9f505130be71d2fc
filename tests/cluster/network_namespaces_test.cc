// Three hosts, each a network namespace with addresses of its own (tests/cluster/virtual_hosts.h):
// the daemons talk gRPC over a management network and UCX over TCP (UCX_TLS=tcp) on a data
// network, as on machines with a separate fabric. A data-parallel x pipeline job across them
// computes the losses of the one-node run bit for bit. A host cut off the data network makes the
// launch fail, before the job runs, with an error naming that host's node and address; once it is
// connected again the same daemons run the job. Skipped where namespaces cannot be made (not root,
// no CAP_NET_ADMIN: containers).
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster/loomd_client.h"
#include "tests/cluster/loomd_process.h"
#include "tests/cluster/virtual_hosts.h"

namespace loom::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kHosts = 3;
// The coordinator's --peer-probe-timeout.
constexpr absl::Duration kProbeTimeout = absl::Seconds(3);

class NetworkNamespacesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<VirtualHosts>> hosts = VirtualHosts::Create(kHosts);
    if (!hosts.ok() && hosts.status().code() == absl::StatusCode::kFailedPrecondition) {
      GTEST_SKIP() << hosts.status().message();
    }
    ASSERT_TRUE(hosts.ok()) << hosts.status();
    hosts_ = *std::move(hosts);
    log_prefix_ = absl::StrCat(::testing::TempDir(), "/network-namespaces-", getpid(), "-");
    for (int host = 0; host < kHosts; ++host) {
      LoomdProcess::Options options;
      options.binary = LOOMD_BINARY;
      options.network_namespace = hosts_->Namespace(host);
      options.listen_address = absl::StrCat(hosts_->ManagementAddress(host), ":0");
      // UCX's own settings: TCP only (between namespaces it would use shared memory), on the data
      // network.
      options.environment = {"UCX_TLS=tcp",
                             absl::StrCat("UCX_NET_DEVICES=", VirtualHosts::kDataDevice)};
      // Plaintext on the management network (an address of its own, not loopback).
      options.arguments = {"--verbose",
                           "--insecure",
                           "--devices",
                           "cpu:2",
                           "--node-name",
                           absl::StrCat("host-", host),
                           "--heartbeat-interval",
                           "200ms",
                           "--node-timeout",
                           "3s"};
      if (host == 0) {
        options.arguments.insert(options.arguments.end(),
                                 {"--peer-probe-timeout", absl::FormatDuration(kProbeTimeout)});
      } else {
        options.arguments.insert(
            options.arguments.end(),
            {"--node-rank", absl::StrCat(host), "--coordinator", daemons_[0]->address()});
      }
      options.log_path = absl::StrCat(log_prefix_, "host-", host, ".log");
      absl::StatusOr<std::unique_ptr<LoomdProcess>> daemon = LoomdProcess::Start(options);
      ASSERT_TRUE(daemon.ok()) << daemon.status();
      daemons_.push_back(*std::move(daemon));
    }
    client_ = std::make_unique<LoomdClient>(daemons_[0]->address());
    ASSERT_TRUE(client_->WaitForReadyNodes(kHosts, absl::Seconds(20))) << daemons_[0]->Log();
  }

  void TearDown() override {
    if (HasFailure()) {
      for (auto& daemon : daemons_) std::cerr << daemon->Log() << "\n";
    }
    for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) (*it)->Signal(SIGTERM);
    daemons_.clear();
    hosts_.reset();  // removes the namespaces
  }

  std::unique_ptr<VirtualHosts> hosts_;
  std::string log_prefix_;
  std::vector<std::unique_ptr<LoomdProcess>> daemons_;
  std::unique_ptr<LoomdClient> client_;
};

TEST_F(NetworkNamespacesTest, DataParallelTimesPipelineAcrossThreeHostsEqualsTheOneNodeRun) {
  // DP 3 x PP 2 on 2 devices per host: stage 0 on host 0 (both) and host 1, stage 1 on host 1 and
  // host 2 (both), so gradients are all-reduced across hosts and activations cross them too.
  gpt::GptConfig config = SmallGpt(4);
  config.data_parallel = 3;
  config.pipeline_stages = 2;
  config.micro_batches = 2;
  absl::StatusOr<job::Job> single = gpt::BuildGptJob(config);
  ASSERT_TRUE(single.ok()) << single.status();
  auto reference =
      LoomdProcess::Start(LOOMD_BINARY, {"--devices", "cpu:6", "--node-name", "single"},
                          absl::StrCat(log_prefix_, "single.log"));
  ASSERT_TRUE(reference.ok()) << reference.status();
  JobOutcome expected = LoomdClient((*reference)->address()).Run(*single);
  (*reference)->Signal(SIGTERM);
  ASSERT_EQ(expected.state, v1::JOB_STATE_SUCCEEDED) << expected.error;

  config.devices_per_node = 2;
  absl::StatusOr<job::Job> spread = gpt::BuildGptJob(config);
  ASSERT_TRUE(spread.ok()) << spread.status();
  JobOutcome actual = client_->Run(*spread);
  ASSERT_EQ(actual.state, v1::JOB_STATE_SUCCEEDED) << actual.error;
  ASSERT_EQ(actual.losses.size(), 4u);
  EXPECT_EQ(actual.losses, expected.losses);
}

TEST_F(NetworkNamespacesTest, AHostCutOffTheDataNetworkFailsTheLaunchNamingIt) {
  gpt::GptConfig config = SmallGpt(2);
  config.pipeline_stages = 3;
  config.devices_per_node = 1;
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  ASSERT_TRUE(job.ok()) << job.status();

  // It runs while the data network is whole (and the hosts learn each other's link addresses).
  JobOutcome before = client_->Run(*job);
  ASSERT_EQ(before.state, v1::JOB_STATE_SUCCEEDED) << before.error;

  // gRPC still reaches every host (the cluster sees three ready nodes); UCX cannot reach host 2.
  ASSERT_TRUE(hosts_->SetDataLinkConnected(2, false).ok());
  const absl::Time submitted = absl::Now();
  JobOutcome outcome = client_->Run(*job);
  const absl::Duration to_failure = absl::Now() - submitted;
  std::cerr << "failed " << to_failure << " after submission: " << outcome.error << "\n";
  EXPECT_EQ(outcome.state, v1::JOB_STATE_FAILED);
  // The launch failed: the job never ran (and so never failed at a transfer).
  EXPECT_THAT(outcome.states, Not(Contains(v1::JOB_STATE_RUNNING)));
  EXPECT_THAT(outcome.error,
              HasSubstr(absl::StrCat("node 2 ('host-2' at ", hosts_->ManagementAddress(2), ":")));
  EXPECT_THAT(outcome.error, HasSubstr("cannot be reached from the other nodes of the job"));
  // The probe timeout, the coordinator's wait for the other nodes' reports (2 s more), launching.
  EXPECT_LT(to_failure, kProbeTimeout + absl::Seconds(5));
  EXPECT_EQ(client_->Nodes().size(), 3u);

  // Connected again, the same daemons run it.
  ASSERT_TRUE(hosts_->SetDataLinkConnected(2, true).ok());
  JobOutcome after = client_->Run(*job);
  EXPECT_EQ(after.state, v1::JOB_STATE_SUCCEEDED) << after.error;
  EXPECT_EQ(after.losses.size(), 2u);
}

}  // namespace
}  // namespace loom::testing
