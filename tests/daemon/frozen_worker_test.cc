// Sessions that would hold a coordinator thread for good. A worker that froze (SIGSTOP, a hung
// host, a network that drops its packets) keeps its connection open but reads nothing: the
// coordinator's write of a command larger than gRPC's flow-control window waits for it. When the
// worker is lost (no heartbeat for --node-timeout), its session is cancelled, so the write returns
// and the job fails naming the node, instead of the coordinator's job thread waiting for TCP to
// give up (many minutes) with every later job queued behind it. A session that never registers is
// ended after the node timeout too.
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "proto/loom/v1/node_service.grpc.pb.h"
#include "tests/daemon/daemon_test_util.h"

namespace loom::daemon::testing {
namespace {

using ::testing::HasSubstr;

class FrozenWorkerTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonOptions options = TestOptions();
    options.heartbeat_interval = absl::Milliseconds(200);
    options.node_timeout = absl::Seconds(2);
    StartDaemon(options);
    nodes_ = v1::NodeService::NewStub(channel_);
  }

  // The coordinator's NodeService, as a worker sees it.
  std::unique_ptr<v1::NodeService::Stub> nodes_;
};

TEST_F(FrozenWorkerTest, ALaunchWaitingForAFrozenWorkerEndsWhenTheWorkerIsLost) {
  // The frozen worker: registers, then neither reads nor sends anything, with its connection open.
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> session =
      nodes_->Session(&context);
  v1::WorkerMessage hello;
  hello.mutable_register_()->set_name("frozen");
  hello.mutable_register_()->set_rank(-1);
  v1::DeviceInfo* device = hello.mutable_register_()->add_devices();
  device->set_type("cpu");
  device->set_index(0);
  ASSERT_TRUE(session->Write(hello));
  v1::CoordinatorMessage registered;
  ASSERT_TRUE(session->Read(&registered));
  ASSERT_TRUE(registered.has_registered());
  ASSERT_EQ(registered.registered().index(), 1);

  // Megabytes of plan: far more than the flow-control window.
  const std::string frozen_job = SubmitOrDie(ReluChain(2000, "node1/cpu:0", /*name_bytes=*/2000));
  ASSERT_TRUE(WaitForState(frozen_job, v1::JOB_STATE_FAILED, absl::Seconds(20)));
  v1::JobInfo info;
  ASSERT_TRUE(GetJob(frozen_job, &info).ok());
  EXPECT_THAT(info.error().message(), HasSubstr("node 1 ('frozen') was lost"));
  // The coordinator's job thread is free: the next job runs.
  const std::string next = SubmitOrDie(TrainingJob(1));
  EXPECT_TRUE(WaitForState(next, v1::JOB_STATE_SUCCEEDED));
  context.TryCancel();
}

TEST_F(FrozenWorkerTest, ASessionThatNeverRegistersEndsAfterTheNodeTimeout) {
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(absl::Seconds(30));
  const absl::Time opened = absl::Now();
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> session =
      nodes_->Session(context.get());
  v1::CoordinatorMessage message;
  EXPECT_FALSE(session->Read(&message));
  const grpc::Status status = session->Finish();
  EXPECT_LT(absl::Now() - opened, absl::Seconds(10));
  // Cancelled by the coordinator (the client sees no other status of a cancelled call).
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();
}

}  // namespace
}  // namespace loom::daemon::testing
