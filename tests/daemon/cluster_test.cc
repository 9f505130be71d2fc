// The coordinator's view of its nodes: each node's message limit (the smaller of the two daemons'
// --max-message-size), and commands over it refused before they reach the node's session; the
// registrations it takes: capped (--max-nodes), MISSING nodes forgotten (--missing-node-expiry),
// no takeover of another node's name or index without its certificate identity.
#include "daemon/cluster.h"

#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::daemon {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kCoordinatorBytes = 64 << 10;

class ClusterTest : public ::testing::Test {
 protected:
  ClusterTest()
      : cluster_(Options(), Self(), [this](const v1::NodeCommand&) {
          ++self_commands_;
          return true;
        }) {}

  static Cluster::Options Options() {
    Cluster::Options options;
    options.max_message_bytes = kCoordinatorBytes;
    return options;
  }

  static v1::NodeInfo Self() {
    v1::NodeInfo self;
    self.set_name("coordinator");
    return self;
  }

  // Registers a worker named `name` that says it takes messages of `max_message_bytes`; its
  // commands are counted in `worker_commands_`.
  absl::StatusOr<Cluster::Registration> Register(const std::string& name,
                                                 int64_t max_message_bytes) {
    v1::RegisterNode node;
    node.set_name(name);
    node.set_rank(-1);
    node.set_max_message_bytes(max_message_bytes);
    return cluster_.Register(node, [this](const v1::NodeCommand&) {
      ++worker_commands_;
      return true;
    });
  }

  // A launch command of about `bytes` bytes.
  static v1::NodeCommand Launch(size_t bytes) {
    v1::NodeCommand command;
    command.set_job_id("job-7");
    command.mutable_launch()->mutable_plan()->set_job_name(std::string(bytes, 'x'));
    return command;
  }

  int self_commands_ = 0;
  int worker_commands_ = 0;
  Cluster cluster_;
};

TEST_F(ClusterTest, ACommandOverAWorkersLimitIsRefusedAndNotSent) {
  absl::StatusOr<Cluster::Registration> registered = Register("small", 4096);
  ASSERT_TRUE(registered.ok()) << registered.status();
  const int worker = registered->index;
  EXPECT_EQ(cluster_.MessageLimit(worker), 4096);
  EXPECT_EQ(cluster_.MessageLimit(0), kCoordinatorBytes);

  absl::Status refused = cluster_.Send(worker, Launch(5000));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), HasSubstr("the launch of job job-7 takes"));
  EXPECT_THAT(refused.message(),
              HasSubstr("over the 4096 bytes a message between the coordinator and node 1 "
                        "('small') may carry"));
  EXPECT_EQ(worker_commands_, 0);

  EXPECT_TRUE(cluster_.Send(worker, Launch(1000)).ok());
  EXPECT_EQ(worker_commands_, 1);
  // The coordinator's own node gets its commands in the process, whatever their size.
  EXPECT_TRUE(cluster_.Send(0, Launch(100000)).ok());
  EXPECT_EQ(self_commands_, 1);
}

TEST_F(ClusterTest, TheSmallerOfTheTwoLimitsApplies) {
  absl::StatusOr<Cluster::Registration> large = Register("large", int64_t{1} << 30);
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(cluster_.MessageLimit(large->index), kCoordinatorBytes);
  EXPECT_EQ(cluster_.Send(large->index, Launch(kCoordinatorBytes)).code(),
            absl::StatusCode::kResourceExhausted);
  // A worker that does not say (one from before the field) gets the coordinator's.
  absl::StatusOr<Cluster::Registration> silent = Register("silent", 0);
  ASSERT_TRUE(silent.ok()) << silent.status();
  EXPECT_EQ(cluster_.MessageLimit(silent->index), kCoordinatorBytes);
}

TEST_F(ClusterTest, AnAbsurdLimitIsInvalidAndAGoneNodeIsUnavailable) {
  absl::StatusOr<Cluster::Registration> tiny = Register("tiny", 100);
  EXPECT_EQ(tiny.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tiny.status().message(), HasSubstr("node 'tiny' registered a message limit of 100"));
  EXPECT_EQ(Register("negative", -1).status().code(), absl::StatusCode::kInvalidArgument);

  absl::StatusOr<Cluster::Registration> registered = Register("leaving", 4096);
  ASSERT_TRUE(registered.ok()) << registered.status();
  cluster_.Disconnected(registered->index, registered->generation,
                        absl::UnavailableError("the test ends it"));
  absl::Status sent = cluster_.Send(registered->index, Launch(10));
  EXPECT_EQ(sent.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(sent.message(), HasSubstr("node 1 ('leaving') is not connected"));
  EXPECT_EQ(cluster_.Send(9, Launch(10)).code(), absl::StatusCode::kUnavailable);
}

// A cluster of its own with `options`, and registrations of named workers in it.
class RegistrationTest : public ::testing::Test {
 protected:
  void Make(Cluster::Options options) {
    cluster_ = std::make_unique<Cluster>(options, v1::NodeInfo(),
                                         [](const v1::NodeCommand&) { return true; });
  }

  absl::StatusOr<Cluster::Registration> Register(
      const std::string& name, int rank = -1, std::optional<std::string> identity = std::nullopt) {
    v1::RegisterNode node;
    node.set_name(name);
    node.set_rank(rank);
    return cluster_->Register(
        node, [](const v1::NodeCommand&) { return true; }, nullptr, std::move(identity));
  }

  void Lose(const Cluster::Registration& registration) {
    cluster_->Disconnected(registration.index, registration.generation,
                           absl::UnavailableError("the test ends it"));
  }

  std::unique_ptr<Cluster> cluster_;
};

// Each node's host memory budget (loomd --host-memory-budget) reaches the compiler's device set
// by node index; a negative one is refused at registration.
TEST_F(RegistrationTest, HostMemoryBudgetsReachTheDeviceSet) {
  Make(Cluster::Options());
  v1::RegisterNode node;
  node.set_name("worker");
  node.set_rank(-1);
  node.set_host_memory_budget_bytes(-1);
  absl::StatusOr<Cluster::Registration> refused =
      cluster_->Register(node, [](const v1::NodeCommand&) { return true; });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), ::testing::HasSubstr("negative host memory budget"));
  node.set_host_memory_budget_bytes(int64_t{3} << 30);
  absl::StatusOr<Cluster::Registration> registered =
      cluster_->Register(node, [](const v1::NodeCommand&) { return true; });
  ASSERT_TRUE(registered.ok()) << registered.status();
  const compiler::DeviceSet devices = cluster_->Devices();
  ASSERT_EQ(devices.host_memory_budget_bytes.size(), static_cast<size_t>(registered->index + 1));
  EXPECT_EQ(devices.host_memory_budget_bytes[registered->index], int64_t{3} << 30);
  EXPECT_EQ(devices.host_memory_budget_bytes[0], 0);  // the coordinator's: none given
  EXPECT_EQ(devices.HostMemoryBudget(), int64_t{3} << 30);
}

TEST_F(RegistrationTest, RegistrationsBeyondMaxNodesAreRefusedMissingOnesIncluded) {
  Cluster::Options options;
  options.max_nodes = 2;
  Make(options);
  ASSERT_TRUE(Register("a").ok());
  absl::StatusOr<Cluster::Registration> b = Register("b");
  ASSERT_TRUE(b.ok());
  absl::StatusOr<Cluster::Registration> c = Register("c");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status().message(),
              HasSubstr("node 'c' cannot join: the coordinator knows 2 workers"));
  // A missing node still counts, and may come back.
  Lose(*b);
  EXPECT_EQ(Register("c").status().code(), absl::StatusCode::kResourceExhausted);
  absl::StatusOr<Cluster::Registration> back = Register("b");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->index, b->index);
  EXPECT_EQ(cluster_->Nodes().size(), 3u);
}

TEST_F(RegistrationTest, AMissingNodeIsForgottenAfterTheExpiry) {
  Cluster::Options options;
  options.max_nodes = 1;
  options.heartbeat_interval = absl::Milliseconds(20);
  options.missing_node_expiry = absl::Milliseconds(100);
  Make(options);
  cluster_->Start();
  absl::StatusOr<Cluster::Registration> gone = Register("gone");
  ASSERT_TRUE(gone.ok());
  Lose(*gone);
  ASSERT_EQ(cluster_->Nodes().size(), 2u);
  EXPECT_EQ(cluster_->Nodes()[1].state(), v1::NODE_STATE_MISSING);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (cluster_->Nodes().size() > 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(cluster_->Nodes().size(), 1u);
  // Its index is free for another node, within the cap.
  absl::StatusOr<Cluster::Registration> next = Register("next");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->index, gone->index);
  cluster_->Stop();
}

TEST_F(RegistrationTest, WithTlsOnlyTheSameCertificateTakesAMissingNodesNameOrIndex) {
  Make(Cluster::Options());
  absl::StatusOr<Cluster::Registration> first = Register("w", 5, "node-a");
  ASSERT_TRUE(first.ok()) << first.status();
  Lose(*first);
  // Its name, with another certificate.
  absl::StatusOr<Cluster::Registration> name = Register("w", -1, "node-b");
  EXPECT_EQ(name.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(name.status().message(),
              HasSubstr("node 'w' (certificate 'node-b') may not take over node 5 ('w', "
                        "missing), which registered with certificate 'node-a'"));
  // Its index, under another name and certificate.
  absl::StatusOr<Cluster::Registration> index = Register("x", 5, "node-b");
  EXPECT_EQ(index.status().code(), absl::StatusCode::kPermissionDenied);
  // Nor without a certificate.
  EXPECT_FALSE(Register("w", 5).ok());
  // Its own certificate takes it back, under its name or another.
  absl::StatusOr<Cluster::Registration> renamed = Register("w2", 5, "node-a");
  ASSERT_TRUE(renamed.ok()) << renamed.status();
  EXPECT_EQ(renamed->index, 5);
  // A connected node's name is taken whatever the certificate.
  EXPECT_EQ(Register("w2", -1, "node-a").status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(RegistrationTest, WithoutTlsARestartedWorkerGetsItsIndexBackButNoOtherNodes) {
  Make(Cluster::Options());
  absl::StatusOr<Cluster::Registration> first = Register("w", 3);
  ASSERT_TRUE(first.ok());
  Lose(*first);
  absl::StatusOr<Cluster::Registration> other = Register("intruder", 3);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other.status().message(), HasSubstr("which node 'w' holds"));
  absl::StatusOr<Cluster::Registration> back = Register("w", 3);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->index, 3);
  // A registration without a name, or with too many devices, is invalid.
  EXPECT_EQ(Register("").status().code(), absl::StatusCode::kInvalidArgument);
  v1::RegisterNode big;
  big.set_name("big");
  big.set_rank(-1);
  for (int index = 0; index <= kMaxRegisteredDevices; ++index) {
    v1::DeviceInfo* device = big.add_devices();
    device->set_type("cpu");
    device->set_index(index);
  }
  absl::StatusOr<Cluster::Registration> refused =
      cluster_->Register(big, [](const v1::NodeCommand&) { return true; });
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("registered 1025 devices (at most 1024)"));
}

TEST_F(RegistrationTest, NoWorkerTakesTheCoordinatorsName) {
  v1::NodeInfo self;
  self.set_name("coordinator");
  cluster_ = std::make_unique<Cluster>(Cluster::Options(), self,
                                       [](const v1::NodeCommand&) { return true; });
  cluster_->SetDraining();
  absl::StatusOr<Cluster::Registration> refused = Register("coordinator");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(refused.status().message(), HasSubstr("as node 0"));
}

}  // namespace
}  // namespace loom::daemon
