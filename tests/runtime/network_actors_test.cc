// SEND / RECEIVE pairs between two nodes' runtimes in one process, over the in-memory network
// (so the sanitizer builds see the pair's threads too): pieces arrive in order and intact.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/job_runtime.h"
#include "testing/plan_builder.h"
#include "tests/runtime/node_runtimes.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr uint32_t kSourceIndex = 0;
constexpr uint32_t kSinkIndex = 1;
constexpr uint32_t kSendIndex = 2;
constexpr uint32_t kReceiveIndex = 3;

// Task `task` moves to CPU device 0 of `node`, on a stream of `kind`, with job-wide `index`.
void Place(plan::Plan& plan, plan::Task& task, int node, plan::StreamKind kind, uint32_t index) {
  plan.set_node(node);
  plan.mutable_devices(0)->mutable_device()->set_node(node);
  task.mutable_stream()->mutable_device()->set_node(node);
  task.mutable_stream()->set_kind(kind);
  task.set_index(index);
}

void SetPeer(plan::Task& task, const plan::Task& peer) {
  task.mutable_peer()->set_task(peer.name());
  *task.mutable_peer()->mutable_stream() = peer.stream();
  task.mutable_peer()->set_index(peer.index());
}

// What the compiler's node split makes of a source on node 0 read by a sink on node 1: node 0
// runs the source and a SEND, node 1 a RECEIVE (whose register has `slots` slots) and the sink.
std::vector<plan::Plan> NodePlans(int64_t pieces, int slots) {
  PlanBuilder sender("network_actors");
  sender.AddCpuDevices(1);
  sender.AddRegister("data", {1024}, plan::FLOAT32, slots);
  plan::Task& source = sender.AddTask("source", plan::SOURCE, 0, {}, {"data"}, "test_piece");
  source.set_num_pieces(pieces);
  Place(sender.mutable_plan(), source, 0, plan::STREAM_COMPUTE, kSourceIndex);
  plan::Task& send = sender.AddTask("send:data@node1", plan::SEND, 0, {"data"}, {});
  Place(sender.mutable_plan(), send, 0, plan::STREAM_COPY_OUT, kSendIndex);

  PlanBuilder receiver("network_actors");
  receiver.AddCpuDevices(1);
  receiver.AddRegister("data@node1", {1024}, plan::FLOAT32, slots);
  plan::Task& sink = receiver.AddTask("sink", plan::SINK, 0, {"data@node1"}, {});
  Place(receiver.mutable_plan(), sink, 1, plan::STREAM_COMPUTE, kSinkIndex);
  plan::Task& receive =
      receiver.AddTask("receive:data@node1", plan::RECEIVE, 0, {}, {"data@node1"});
  Place(receiver.mutable_plan(), receive, 1, plan::STREAM_COPY_IN, kReceiveIndex);

  SetPeer(send, receive);
  SetPeer(receive, send);
  return {sender.plan(), receiver.plan()};
}

std::vector<float> Range(int count) {
  std::vector<float> values(count);
  for (int i = 0; i < count; ++i) values[i] = static_cast<float>(i);
  return values;
}

TEST(NetworkActorsTest, PiecesArriveInOrderAndIntact) {
  for (int slots : {1, 2, 4}) {
    SCOPED_TRACE(slots);
    NodeRuntimes nodes(NodePlans(200, slots));
    ASSERT_TRUE(nodes.Start().ok());
    ASSERT_TRUE(nodes.Wait().ok());
    EXPECT_THAT(SinkValues(nodes.job(1), "sink"), ElementsAreArray(Range(200)));
    EXPECT_EQ(nodes.network().transfers(), 200);
  }
}

// A lost receiving node fails the RECEIVE's posted receives: that node's job ends naming the
// sending task and node; the sender's job ends too (its next transfer fails, or it stalls waiting
// for credit), never hangs.
TEST(NetworkActorsTest, ALostPeerEndsBothJobs) {
  JobOptions options;
  options.stall_timeout = absl::Seconds(2);
  NodeRuntimes nodes(NodePlans(1'000'000, 2), options);
  ASSERT_TRUE(nodes.Start().ok());
  nodes.network().FailNode(1, absl::UnavailableError("node 1 is lost"));
  absl::Status receiver = nodes.WaitFor(1);
  EXPECT_EQ(receiver.code(), absl::StatusCode::kUnavailable) << receiver;
  EXPECT_THAT(receiver.message(), HasSubstr("receiving from 'send:data@node1' on node 0"));
  EXPECT_THAT(receiver.message(), HasSubstr("node 1 is lost"));
  EXPECT_FALSE(nodes.WaitFor(0).ok());
}

}  // namespace
}  // namespace loom::testing
