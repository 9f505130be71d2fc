// The coordinator's part of joining communicators across nodes (NCCL's unique id): what a node
// reports with its launch (NodeLaunched.communicator_ids) reaches every node in the connect
// command. A real coordinator loomd and a worker played by this test over NodeService/Session,
// since only GPU jobs make such ids.
#include <signal.h>

#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/loom/v1/node_service.grpc.pb.h"
#include "tests/cluster/loomd_client.h"
#include "tests/cluster/loomd_process.h"
#include "tools/loom-gpt/gpt_model.h"
#include "transport/transport_network.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

// Reads coordinator messages until one satisfies `wanted` (skipping the others), or the stream
// ends.
template <typename Predicate>
bool ReadUntil(grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>& stream,
               v1::CoordinatorMessage* message, Predicate wanted) {
  while (stream.Read(message)) {
    if (wanted(*message)) return true;
  }
  return false;
}

TEST(CommunicatorIdsTest, IdsReportedAtLaunchReachEveryNodeWithTheConnectCommand) {
  auto coordinator = LoomdProcess::Start(
      LOOMD_BINARY, {"--devices", "cpu:1", "--node-name", "node-0", "--node-timeout", "60s"},
      absl::StrCat(::testing::TempDir(), "/loomd-communicator-ids.log"));
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();

  // The worker: registers one CPU device as node 1.
  auto channel = grpc::CreateChannel((*coordinator)->address(), grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::NodeService::Stub> stub = v1::NodeService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  auto stream = stub->Session(&context);
  v1::WorkerMessage registration;
  v1::RegisterNode* node = registration.mutable_register_();
  node->set_name("played-by-the-test");
  node->set_rank(1);
  node->set_address("127.0.0.1:1");
  node->set_version("test");
  v1::DeviceInfo* device = node->add_devices();
  device->set_type("cpu");
  device->set_index(0);
  ASSERT_TRUE(stream->Write(registration));
  v1::CoordinatorMessage message;
  ASSERT_TRUE(stream->Read(&message));
  ASSERT_TRUE(message.has_registered());
  EXPECT_EQ(message.registered().index(), 1);

  // A job over both nodes (data parallel, one device each).
  LoomdClient client((*coordinator)->address());
  ASSERT_TRUE(client.WaitForReadyNodes(2, absl::Seconds(20))) << (*coordinator)->Log();
  gpt::GptConfig config = SmallGpt(2);
  config.data_parallel = 2;
  config.devices_per_node = 1;
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::string> id = client.Submit(*job);
  ASSERT_TRUE(id.ok()) << id.status();

  // Launch: answer with a UCX address (a network of this process's) and an id, as the node of a
  // communicator's rank 0 would.
  absl::StatusOr<std::unique_ptr<transport::TransportNetwork>> network =
      transport::TransportNetwork::Create(1);
  ASSERT_TRUE(network.ok()) << network.status();
  (*network)->SetHandlers([](const ActorMessage&) {}, [](const absl::Status&) {});
  ASSERT_TRUE(ReadUntil(*stream, &message, [](const v1::CoordinatorMessage& received) {
    return received.has_command() && received.command().has_launch();
  })) << (*coordinator)->Log();
  EXPECT_EQ(message.command().job_id(), *id);
  const std::string nccl_id("\x01\x00\xff id bytes", 13);  // bytes, not text
  v1::WorkerMessage launched;
  launched.mutable_job()->set_job_id(*id);
  launched.mutable_job()->mutable_launched()->set_address((*network)->address());
  (*launched.mutable_job()->mutable_launched()->mutable_communicator_ids())["gpus_dp"] = nccl_id;
  ASSERT_TRUE(stream->Write(launched));

  // Connect: every node's address, and the id (the real node 0, a CPU job, made none).
  ASSERT_TRUE(ReadUntil(*stream, &message, [](const v1::CoordinatorMessage& received) {
    return received.has_command() && received.command().has_connect();
  })) << (*coordinator)->Log();
  const v1::ConnectNodeJob& connect = message.command().connect();
  EXPECT_EQ(connect.addresses().size(), 2);
  EXPECT_EQ(connect.addresses().at(1), (*network)->address());
  ASSERT_EQ(connect.communicator_ids().size(), 1);
  EXPECT_EQ(connect.communicator_ids().at("gpus_dp"), nccl_id);
  // The join gets what the launch timeout (60 s) leaves after the probes (5 s), less 2 s for the
  // node's report: its error, naming the communicator, comes before the coordinator's timeout.
  EXPECT_EQ(connect.probe_timeout_milliseconds(), 5000);
  EXPECT_EQ(connect.join_timeout_milliseconds(), 53000);
  // Node 0 hears from this one, as from a real worker, and this one from node 0; the job starts
  // once node 0 heard the probe. (Ending the job before that made node 0 close its connections
  // while this process's endpoint still set up, which UCX 1.13 does not survive: node 0 now waits
  // a moment for the probe at its release, transport/README.md, *Shutdown*.)
  ASSERT_TRUE((*network)->Connect(0, connect.addresses().at(0)).ok());
  ASSERT_TRUE((*network)->SendProbe(0).ok());
  absl::StatusOr<std::map<int, absl::Status>> unreachable =
      (*network)->WaitForProbes({0}, absl::Seconds(30));
  ASSERT_TRUE(unreachable.ok()) << unreachable.status();
  ASSERT_TRUE(unreachable->empty()) << unreachable->begin()->second;
  v1::WorkerMessage connected;
  connected.mutable_job()->set_job_id(*id);
  connected.mutable_job()->set_connected(true);
  ASSERT_TRUE(stream->Write(connected));
  ASSERT_TRUE(ReadUntil(*stream, &message, [](const v1::CoordinatorMessage& received) {
    return received.has_command() && received.command().has_start();
  })) << (*coordinator)->Log();

  // End the job here (this worker runs nothing).
  v1::WorkerMessage ended;
  ended.mutable_job()->set_job_id(*id);
  ended.mutable_job()->mutable_ended()->set_code(13);  // INTERNAL
  ended.mutable_job()->mutable_ended()->set_message("the test's worker stops here");
  ASSERT_TRUE(stream->Write(ended));
  const JobOutcome outcome = client.Watch(*id, absl::Seconds(30));
  EXPECT_EQ(outcome.state, v1::JOB_STATE_FAILED);
  EXPECT_THAT(outcome.error, HasSubstr("the test's worker stops here"));
  stream->WritesDone();
  context.TryCancel();
  (*network)->Stop();
  (*coordinator)->Signal(SIGTERM);
}

}  // namespace
}  // namespace loom::testing
