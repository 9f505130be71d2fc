// SEND / RECEIVE pairs between two nodes' runtimes in one process, over the in-memory network
// (so the sanitizer builds see the pair's threads too): pieces arrive in order and intact.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/job_runtime.h"
#include "runtime/plan_builder.h"
#include "tests/runtime/in_memory_network.h"
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

// Both nodes' runtimes over one in-memory network, which stops first (pending receives and late
// credits then reach runtimes that still exist).
class TwoNodes {
 public:
  explicit TwoNodes(const std::vector<plan::Plan>& plans,
                    absl::Duration stall_timeout = absl::Seconds(20))
      : network_(2) {
    for (int node = 0; node < 2; ++node) {
      JobOptions options;
      options.network = network_.node(node);
      options.stall_timeout = stall_timeout;
      absl::StatusOr<std::unique_ptr<JobRuntime>> job = MakeJob(plans[node], std::move(options));
      status_.Update(job.status());
      if (!job.ok()) return;
      jobs_.push_back(std::move(*job));
      network_.SetMessageReceiver(node, [job = jobs_.back().get()](const ActorMessage& message) {
        job->DeliverFromNetwork(message);
      });
    }
  }

  InMemoryNetwork& network() { return network_; }
  const JobRuntime& job(int node) const { return *jobs_[node]; }

  absl::Status Start() {
    for (auto& job : jobs_) status_.Update(job->Start());
    return status_;
  }
  absl::Status Wait() {
    for (auto& job : jobs_) status_.Update(job->Wait());
    return status_;
  }
  absl::Status WaitFor(int node) { return jobs_[node]->Wait(); }

 private:
  std::vector<std::unique_ptr<JobRuntime>> jobs_;
  InMemoryNetwork network_;  // destroyed (stopped) before the runtimes
  absl::Status status_;
};

std::vector<float> Range(int count) {
  std::vector<float> values(count);
  for (int i = 0; i < count; ++i) values[i] = static_cast<float>(i);
  return values;
}

TEST(NetworkActorsTest, PiecesArriveInOrderAndIntact) {
  for (int slots : {1, 2, 4}) {
    SCOPED_TRACE(slots);
    TwoNodes nodes(NodePlans(200, slots));
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
  TwoNodes nodes(NodePlans(1'000'000, 2), absl::Seconds(2));
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
