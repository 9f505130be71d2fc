// Network input is untrusted: a forged or malformed actor message from another node (an unknown
// actor, a register or slot the destination does not have, a sender that is not its peer, a second
// credit, an announcement without a credit, an end that contradicts what came) fails the job with
// DATA_LOSS naming the peer node, and never crashes the process. One node's runtime runs over a
// network that only records what it is asked; the test plays the peer.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/job_runtime.h"
#include "runtime/network.h"
#include "testing/plan_builder.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kSourceIndex = 0;
constexpr uint32_t kSinkIndex = 1;
constexpr uint32_t kSendIndex = 2;
constexpr uint32_t kReceiveIndex = 3;
constexpr int kSlots = 2;

// Counts the messages sent and keeps the transfers' completions without ever running them.
class RecordingNetwork final : public Network {
 public:
  explicit RecordingNetwork(int node) : node_(node) {}
  int node() const override { return node_; }
  absl::string_view transport() const override { return "recording"; }
  absl::Status SendMessage(const ActorMessage& message) override {
    messages_.fetch_add(1);
    return absl::OkStatus();
  }
  absl::Status SendData(int destination, Tag tag, const void* buffer, size_t size,
                        Completion done) override {
    std::lock_guard<std::mutex> lock(mutex_);
    completions_.push_back(std::move(done));
    return absl::OkStatus();
  }
  absl::Status ReceiveData(Tag tag, void* buffer, size_t size, Completion done) override {
    std::lock_guard<std::mutex> lock(mutex_);
    completions_.push_back(std::move(done));
    return absl::OkStatus();
  }
  bool DriveUntil(absl::FunctionRef<bool()> done,
                  std::chrono::steady_clock::time_point deadline) override {
    return false;
  }
  void WakeDriver() override {}

  // Waits until at least `count` messages were sent (at most 5 s).
  bool WaitForMessages(int count) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (messages_.load() < count) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }

 private:
  const int node_;
  std::atomic<int> messages_{0};
  std::mutex mutex_;
  std::vector<Completion> completions_;
};

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

// A source on node 0 read by a sink on node 1: node 0 runs the source and a SEND, node 1 a
// RECEIVE and the sink.
struct NodePlans {
  plan::Plan sender;
  plan::Plan receiver;
  ActorId source, send, receive, sink;
};

NodePlans MakeNodePlans() {
  PlanBuilder sender("forged");
  sender.AddCpuDevices(1);
  sender.AddRegister("data", {16}, plan::FLOAT32, kSlots);
  plan::Task& source = sender.AddTask("source", plan::SOURCE, 0, {}, {"data"}, "test_piece");
  source.set_num_pieces(1'000'000);
  Place(sender.mutable_plan(), source, 0, plan::STREAM_COMPUTE, kSourceIndex);
  plan::Task& send = sender.AddTask("send:data@node1", plan::SEND, 0, {"data"}, {});
  Place(sender.mutable_plan(), send, 0, plan::STREAM_COPY_OUT, kSendIndex);

  PlanBuilder receiver("forged");
  receiver.AddCpuDevices(1);
  receiver.AddRegister("data@node1", {16}, plan::FLOAT32, kSlots);
  plan::Task& sink = receiver.AddTask("sink", plan::SINK, 0, {"data@node1"}, {});
  Place(receiver.mutable_plan(), sink, 1, plan::STREAM_COMPUTE, kSinkIndex);
  plan::Task& receive =
      receiver.AddTask("receive:data@node1", plan::RECEIVE, 0, {}, {"data@node1"});
  Place(receiver.mutable_plan(), receive, 1, plan::STREAM_COPY_IN, kReceiveIndex);
  SetPeer(send, receive);
  SetPeer(receive, send);

  NodePlans plans;
  plans.source = ActorId::Make(source.stream(), kSourceIndex);
  plans.send = ActorId::Make(send.stream(), kSendIndex);
  plans.receive = ActorId::Make(receive.stream(), kReceiveIndex);
  plans.sink = ActorId::Make(sink.stream(), kSinkIndex);
  plans.sender = sender.plan();
  plans.receiver = receiver.plan();
  return plans;
}

ActorMessage Message(MessageType type, ActorId source, ActorId destination, int32_t slot = 0,
                     int64_t piece = 0, uint32_t register_index = 0) {
  ActorMessage message;
  message.type = type;
  message.source = source;
  message.destination = destination;
  message.slot = slot;
  message.piece = piece;
  message.register_index = register_index;
  return message;
}

// Runs one node's plan, waits until it sent `wait_for_messages` messages (its credits), hands it
// `forged` as if from the network, and returns how the job ended.
absl::Status RunWithForged(const plan::Plan& plan, int node, int wait_for_messages,
                           const std::vector<ActorMessage>& forged) {
  RecordingNetwork network(node);
  JobOptions options;
  options.network = &network;
  // Without the checks, most forged messages would leave the job waiting: let a stall show it.
  options.stall_timeout = absl::Seconds(2);
  auto job = MakeJob(plan, options);
  if (!job.ok()) return job.status();
  if (absl::Status started = (*job)->Start(); !started.ok()) return started;
  EXPECT_TRUE(network.WaitForMessages(wait_for_messages));
  for (const ActorMessage& message : forged) (*job)->DeliverFromNetwork(message);
  absl::Status status = (*job)->Wait();
  job->reset();
  return status;
}

absl::Status ToReceiver(const std::vector<ActorMessage>& forged) {
  NodePlans plans = MakeNodePlans();
  return RunWithForged(plans.receiver, 1, kSlots, forged);
}

void ExpectDataLossFromNodeZero(const absl::Status& status, const std::string& what) {
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("from node 0")) << status;
  EXPECT_THAT(status.message(), HasSubstr(what)) << status;
}

TEST(NetworkInputTest, AMessageForAnActorThisNodeDoesNotRunFailsTheJob) {
  NodePlans plans = MakeNodePlans();
  ActorId unknown = ActorId::FromValue((plans.receive.value() & ~uint64_t{ActorId::kMaxTaskIndex}) |
                                       77);
  ExpectDataLossFromNodeZero(ToReceiver({Message(MessageType::kSent, plans.send, unknown)}),
                             "which this node does not run");
  // The right task index on another stream is no actor of this node either.
  ActorId other_stream = ActorId::FromValue(plans.receive.value() ^ (uint64_t{1} << 24));
  ExpectDataLossFromNodeZero(ToReceiver({Message(MessageType::kSent, plans.send, other_stream)}),
                             "which this node does not run");
}

TEST(NetworkInputTest, AWrongRegisterFailsTheJob) {
  NodePlans plans = MakeNodePlans();
  ExpectDataLossFromNodeZero(
      ToReceiver({Message(MessageType::kReady, plans.send, plans.sink, 0, 0, /*register=*/5)}),
      "not a register this actor reads");
  ExpectDataLossFromNodeZero(
      ToReceiver({Message(MessageType::kFree, plans.send, plans.receive, 0, 0, /*register=*/0)}),
      "takes only announcements and the end");
}

TEST(NetworkInputTest, ASlotOutOfRangeFailsTheJob) {
  NodePlans plans = MakeNodePlans();
  for (int32_t slot : {kSlots, -1, 1 << 30}) {
    SCOPED_TRACE(slot);
    ExpectDataLossFromNodeZero(
        ToReceiver({Message(MessageType::kSent, plans.send, plans.receive, slot)}), "has 2 slots");
  }
}

TEST(NetworkInputTest, AMessageOfTheWrongKindOrSenderFailsTheJob) {
  NodePlans plans = MakeNodePlans();
  ExpectDataLossFromNodeZero(
      ToReceiver({Message(MessageType::kCredit, plans.send, plans.receive)}),
      "takes only announcements");
  ExpectDataLossFromNodeZero(
      ToReceiver({Message(MessageType::kSent, plans.source, plans.receive)}),
      "takes messages only from 'send:data@node1'");
  ExpectDataLossFromNodeZero(ToReceiver({Message(MessageType::kAbort, plans.send, plans.receive)}),
                             "does not cross nodes");
  ExpectDataLossFromNodeZero(
      ToReceiver({Message(MessageType::kTransferDone, plans.send, plans.receive)}),
      "does not cross nodes");
  ExpectDataLossFromNodeZero(
      ToReceiver({Message(MessageType::kPeerEnd, plans.send, plans.receive, 0, /*piece=*/-3)}),
      "a negative piece");
}

TEST(NetworkInputTest, ASenderClaimingThisNodeFailsTheJob) {
  NodePlans plans = MakeNodePlans();
  absl::Status status = ToReceiver({Message(MessageType::kSent, plans.sink, plans.receive)});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("claims to be on this node")) << status;
}

TEST(NetworkInputTest, AnAnnouncementThatContradictsTheCreditsFailsTheJob) {
  NodePlans plans = MakeNodePlans();
  // Both slots were posted and credited (the test waits for the credits); slot 0 twice.
  ExpectDataLossFromNodeZero(
      ToReceiver({Message(MessageType::kSent, plans.send, plans.receive, 0, 0),
                  Message(MessageType::kSent, plans.send, plans.receive, 0, 1)}),
      "the slot was announced already");
  // An end that counts fewer pieces than were announced.
  ExpectDataLossFromNodeZero(
      ToReceiver({Message(MessageType::kSent, plans.send, plans.receive, 1, 0),
                  Message(MessageType::kPeerEnd, plans.send, plans.receive, 0, /*piece=*/0)}),
      "an end after 0 pieces, but 1 were announced");
  // Two ends.
  ExpectDataLossFromNodeZero(
      ToReceiver({Message(MessageType::kPeerEnd, plans.send, plans.receive, 0, 5),
                  Message(MessageType::kPeerEnd, plans.send, plans.receive, 0, 5)}),
      "a second end");
}

TEST(NetworkInputTest, ForgedCreditsFailTheSendingJob) {
  NodePlans plans = MakeNodePlans();
  // From node 1 now: the receiver is the peer.
  auto expect = [&](const std::vector<ActorMessage>& forged, const std::string& what) {
    absl::Status status = RunWithForged(plans.sender, 0, 0, forged);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_THAT(status.message(), HasSubstr("from node 1")) << status;
    EXPECT_THAT(status.message(), HasSubstr(what)) << status;
  };
  // A negative slot would make a transfer tag with the collectives' bit set.
  expect({Message(MessageType::kCredit, plans.receive, plans.send, -1)}, "at most");
  expect({Message(MessageType::kCredit, plans.receive, plans.send, 1 << 20)}, "at most");
  expect({Message(MessageType::kCredit, plans.receive, plans.send, 0),
          Message(MessageType::kCredit, plans.receive, plans.send, 0)},
         "a second credit for a slot already credited");
  expect({Message(MessageType::kCredit, plans.sink, plans.send, 0)},
         "takes credits only from 'receive:data@node1'");
  // READY for the SEND's input, claiming to come from its producer on another node.
  ActorId remote_source = ActorId::FromValue(plans.source.value() | (uint64_t{1} << 48));
  expect({Message(MessageType::kReady, remote_source, plans.send, 0, 0, 0)},
         "takes only credits");
}

TEST(NetworkInputTest, AFailedJobIgnoresLaterForgedMessagesAndTheNextJobRuns) {
  NodePlans plans = MakeNodePlans();
  ExpectDataLossFromNodeZero(
      ToReceiver({Message(MessageType::kSent, plans.send, plans.receive, 9),
                  Message(MessageType::kSent, plans.send, plans.receive, -9),
                  Message(MessageType::kReady, plans.send, plans.sink, 0, 0, 99)}),
      "has 2 slots");
  PlanBuilder builder("after");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(3);
  builder.AddTask("sink", plan::SINK, 0, {"x"}, {});
  auto job = MakeJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE((*job)->Run().ok());
  EXPECT_THAT(SinkValues(**job, "sink"), ::testing::ElementsAre(0, 1, 2));
}

}  // namespace
}  // namespace loom::testing
