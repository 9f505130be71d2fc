// The coordinator's view of its nodes: each node's message limit (the smaller of the two daemons'
// --max-message-size), and commands over it refused before they reach the node's session.
#include "daemon/cluster.h"

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

}  // namespace
}  // namespace loom::daemon
