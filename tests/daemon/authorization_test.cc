// Authorization by role with mutual TLS (rpc/tls.h): only node certificates join, clients act on
// their own jobs, admins on all, metrics certificates on none; a worker forwards its caller's
// identity, which the coordinator trusts from a node only. Certificates from scripts/make-certs.
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "proto/loom/v1/cluster_service.grpc.pb.h"
#include "proto/loom/v1/job_service.grpc.pb.h"
#include "proto/loom/v1/node_service.grpc.pb.h"
#include "rpc/tls.h"
#include "tests/daemon/daemon_test_util.h"
#include "tests/rpc/test_certificates.h"

namespace loom::daemon {
namespace {

using testing::ContextWithDeadline;
using testing::SlowJob;
using testing::TestOptions;
using testing::TrainingJob;
using ::testing::HasSubstr;

class AuthorizationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    directory_ = new std::string(absl::StrCat(::testing::TempDir(), "/authorization-", getpid()));
    ASSERT_TRUE(loom::testing::MakeCertificateWith("--role node", *directory_, "coordinator",
                                                   "127.0.0.1"));
    ASSERT_TRUE(
        loom::testing::MakeCertificateWith("--role node", *directory_, "worker", "127.0.0.1"));
    ASSERT_TRUE(loom::testing::MakeCertificate(*directory_, "alice"));
    ASSERT_TRUE(loom::testing::MakeCertificateWith("--role client", *directory_, "bob"));
    ASSERT_TRUE(loom::testing::MakeCertificateWith("--role admin", *directory_, "operator"));
    ASSERT_TRUE(loom::testing::MakeCertificateWith("--role metrics", *directory_, "prometheus"));
  }
  static void TearDownTestSuite() { delete directory_; }

  static std::optional<TlsCredentials> Credentials(const std::string& name) {
    return loom::testing::ReadCredentials(
        loom::testing::CertificateFiles(*directory_, *directory_, name));
  }

  void SetUp() override {
    DaemonOptions options = TestOptions();
    options.tls = Credentials("coordinator");
    ASSERT_TRUE(options.tls.has_value());
    absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    coordinator_ = *std::move(daemon);
  }

  // A channel to `address` (the coordinator's by default) presenting `name`'s certificate.
  std::shared_ptr<grpc::Channel> Channel(const std::string& name, const std::string& address = "") {
    return grpc::CreateChannel(address.empty() ? coordinator_->address() : address,
                               MakeChannelCredentials(Credentials(name)));
  }
  std::unique_ptr<v1::JobService::Stub> Jobs(const std::string& name,
                                             const std::string& address = "") {
    return v1::JobService::NewStub(Channel(name, address));
  }

  // SubmitJob of `job` as `name`; the job's info on success.
  grpc::Status Submit(v1::JobService::Stub& jobs, const job::Job& job, v1::JobInfo* info,
                      grpc::ClientContext* context = nullptr) {
    v1::SubmitJobRequest request;
    *request.mutable_job() = job;
    v1::SubmitJobResponse response;
    std::unique_ptr<grpc::ClientContext> own = ContextWithDeadline();
    grpc::Status status = jobs.SubmitJob(context != nullptr ? context : own.get(), request,
                                         &response);
    if (info != nullptr) *info = response.job();
    return status;
  }
  grpc::Status Get(v1::JobService::Stub& jobs, const std::string& job_id) {
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    v1::GetJobResponse response;
    return jobs.GetJob(ContextWithDeadline().get(), request, &response);
  }
  grpc::Status Cancel(v1::JobService::Stub& jobs, const std::string& job_id,
                      grpc::ClientContext* context = nullptr) {
    v1::CancelJobRequest request;
    request.set_job_id(job_id);
    v1::CancelJobResponse response;
    std::unique_ptr<grpc::ClientContext> own = ContextWithDeadline(absl::Seconds(30));
    return jobs.CancelJob(context != nullptr ? context : own.get(), request, &response);
  }
  // The ids ListJobs returns to `jobs`' caller.
  std::vector<std::string> List(v1::JobService::Stub& jobs,
                                grpc::ClientContext* context = nullptr) {
    v1::ListJobsResponse response;
    std::unique_ptr<grpc::ClientContext> own = ContextWithDeadline();
    grpc::Status status =
        jobs.ListJobs(context != nullptr ? context : own.get(), v1::ListJobsRequest(), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<std::string> ids;
    for (const v1::JobInfo& job : response.jobs()) ids.push_back(job.job_id());
    return ids;
  }

  static std::string* directory_;
  std::unique_ptr<Daemon> coordinator_;
};

std::string* AuthorizationTest::directory_ = nullptr;

TEST_F(AuthorizationTest, AClientCertificateCannotRegisterAsANode) {
  std::unique_ptr<v1::NodeService::Stub> nodes = v1::NodeService::NewStub(Channel("alice"));
  std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline();
  auto session = nodes->Session(context.get());
  v1::WorkerMessage message;
  message.mutable_register_()->set_name("fake");
  message.mutable_register_()->set_rank(-1);
  message.mutable_register_()->add_devices()->set_type("cpu");
  session->Write(message);
  session->WritesDone();
  v1::CoordinatorMessage answer;
  EXPECT_FALSE(session->Read(&answer));
  grpc::Status status = session->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("client 'alice' may not register as a node: that needs a certificate "
                        "with role node"));
  // And it did not join.
  v1::ListNodesResponse listed;
  ASSERT_TRUE(v1::ClusterService::NewStub(Channel("operator"))
                  ->ListNodes(ContextWithDeadline().get(), v1::ListNodesRequest(), &listed)
                  .ok());
  EXPECT_EQ(listed.nodes_size(), 1);
}

TEST_F(AuthorizationTest, AMetricsCertificateCannotSubmitListOrReadNodes) {
  std::unique_ptr<v1::JobService::Stub> jobs = Jobs("prometheus");
  grpc::Status status = Submit(*jobs, TrainingJob(1), nullptr);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(),
              HasSubstr("metrics 'prometheus' may not submit jobs: that needs a certificate with "
                        "role client or admin"));
  v1::ListJobsResponse listed;
  EXPECT_EQ(jobs->ListJobs(ContextWithDeadline().get(), v1::ListJobsRequest(), &listed)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::ListNodesResponse nodes;
  EXPECT_EQ(v1::ClusterService::NewStub(Channel("prometheus"))
                ->ListNodes(ContextWithDeadline().get(), v1::ListNodesRequest(), &nodes)
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AuthorizationTest, ANodeCertificateCannotSubmit) {
  grpc::Status status = Submit(*Jobs("worker"), TrainingJob(1), nullptr);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("node 'worker' may not submit jobs"));
}

TEST_F(AuthorizationTest, AClientActsOnItsOwnJobsOnlyAndAnAdminOnAll) {
  std::unique_ptr<v1::JobService::Stub> alice = Jobs("alice");
  std::unique_ptr<v1::JobService::Stub> bob = Jobs("bob");
  std::unique_ptr<v1::JobService::Stub> admin = Jobs("operator");
  v1::JobInfo submitted;
  ASSERT_TRUE(Submit(*alice, SlowJob(500, 20000), &submitted).ok());
  EXPECT_EQ(submitted.owner(), "alice");
  const std::string id = submitted.job_id();

  grpc::Status read = Get(*bob, id);
  EXPECT_EQ(read.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(read.error_message(), HasSubstr("client 'bob' may not read job '" + id + "'"));
  grpc::Status cancelled = Cancel(*bob, id);
  EXPECT_EQ(cancelled.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(cancelled.error_message(), HasSubstr("client 'bob' may not cancel job"));
  v1::WatchJobRequest watch;
  watch.set_job_id(id);
  std::unique_ptr<grpc::ClientContext> watching = ContextWithDeadline();
  v1::JobEvent event;
  auto events = bob->WatchJob(watching.get(), watch);
  EXPECT_FALSE(events->Read(&event));
  EXPECT_EQ(events->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::GetPlanRequest plan;
  plan.set_job_id(id);
  v1::GetPlanResponse plan_response;
  EXPECT_EQ(bob->GetPlan(ContextWithDeadline().get(), plan, &plan_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::GetTraceRequest trace;
  trace.set_job_id(id);
  v1::GetTraceResponse trace_response;
  EXPECT_EQ(bob->GetTrace(ContextWithDeadline().get(), trace, &trace_response).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Bob lists none of it; alice and the admin see it.
  EXPECT_TRUE(List(*bob).empty());
  EXPECT_EQ(List(*alice), std::vector<std::string>{id});
  EXPECT_EQ(List(*admin), std::vector<std::string>{id});
  EXPECT_TRUE(Get(*alice, id).ok());
  EXPECT_TRUE(Get(*admin, id).ok());
  // The admin cancels it.
  grpc::Status by_admin = Cancel(*admin, id);
  EXPECT_TRUE(by_admin.ok()) << by_admin.error_message();
}

TEST_F(AuthorizationTest, ForwardedCallersAreTrustedFromNodesOnly) {
  std::unique_ptr<v1::JobService::Stub> bob = Jobs("bob");
  v1::JobInfo bobs;
  ASSERT_TRUE(Submit(*bob, TrainingJob(1), &bobs).ok());

  // Alice claims to forward for an admin: ignored, she is still a client.
  std::unique_ptr<v1::JobService::Stub> alice = Jobs("alice");
  std::unique_ptr<grpc::ClientContext> forged = ContextWithDeadline();
  Caller admin;
  admin.authenticated = true;
  admin.identity = "operator";
  admin.roles = static_cast<uint32_t>(Role::kAdmin);
  AddForwardedCaller(admin, forged.get());
  EXPECT_TRUE(List(*alice, forged.get()).empty());
  std::unique_ptr<grpc::ClientContext> forged_cancel = ContextWithDeadline();
  AddForwardedCaller(admin, forged_cancel.get());
  EXPECT_EQ(Cancel(*alice, bobs.job_id(), forged_cancel.get()).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // A node forwarding for carol (a client): the job is hers.
  std::unique_ptr<grpc::ClientContext> forwarded = ContextWithDeadline();
  Caller carol;
  carol.authenticated = true;
  carol.identity = "carol";
  carol.roles = static_cast<uint32_t>(Role::kClient);
  AddForwardedCaller(carol, forwarded.get());
  v1::JobInfo carols;
  grpc::Status status = Submit(*Jobs("worker"), TrainingJob(1), &carols, forwarded.get());
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(carols.owner(), "carol");
}

TEST_F(AuthorizationTest, AWorkerForwardsItsCallersIdentity) {
  DaemonOptions options = TestOptions();
  options.node_name = "worker";
  options.coordinator_address = coordinator_->address();
  options.tls = Credentials("worker");
  absl::StatusOr<std::unique_ptr<Daemon>> worker = Daemon::Start(options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  const std::string address = (*worker)->address();
  // It joins (a node certificate).
  std::unique_ptr<v1::ClusterService::Stub> cluster =
      v1::ClusterService::NewStub(Channel("operator"));
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  v1::ListNodesResponse nodes;
  while (absl::Now() < deadline) {
    nodes.Clear();
    ASSERT_TRUE(
        cluster->ListNodes(ContextWithDeadline().get(), v1::ListNodesRequest(), &nodes).ok());
    if (nodes.nodes_size() == 2 && nodes.nodes(1).state() == v1::NODE_STATE_READY) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(nodes.nodes_size(), 2);

  v1::JobInfo submitted;
  grpc::Status status = Submit(*Jobs("alice", address), TrainingJob(1), &submitted);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(submitted.owner(), "alice");
  EXPECT_TRUE(Get(*Jobs("alice", address), submitted.job_id()).ok());
  grpc::Status other = Get(*Jobs("bob", address), submitted.job_id());
  EXPECT_EQ(other.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(other.error_message(), HasSubstr("client 'bob'"));
  EXPECT_EQ(Submit(*Jobs("prometheus", address), TrainingJob(1), nullptr).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  (*worker)->Shutdown(absl::ZeroDuration());
}

}  // namespace
}  // namespace loom::daemon
