// Mutual TLS (--tls-ca, --tls-cert, --tls-key): a coordinator and a worker with certificates of
// one authority (scripts/make-certs) form a cluster and run a job across both nodes for a client
// with its own certificate; a client or a worker without a certificate of that authority gets
// nothing, and a worker whose certificate is not a node's (role, rpc/tls.h) cannot join.
#include "rpc/tls.h"

#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cluster_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/rpc/test_certificates.h"
#include "tests/cluster/loomd_client.h"
#include "tests/cluster/loomd_process.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> TlsFlags(const TlsFiles& files) {
  return {"--tls-ca",  files.authority_path,  "--tls-cert", files.certificate_path,
          "--tls-key", files.private_key_path};
}

// The files as they are, without ReadTlsFiles' checks: a client that is not Loom's.
TlsCredentials ReadUnchecked(const TlsFiles& files) {
  auto read = [](const std::string& path) {
    std::ifstream file(path);
    std::stringstream contents;
    contents << file.rdbuf();
    return contents.str();
  };
  return {read(files.authority_path), read(files.certificate_path), read(files.private_key_path)};
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = absl::StrCat(::testing::TempDir(), "/tls-", getpid(), "-");
    certificates_ = absl::StrCat(prefix_, "certs");
    other_authority_ = absl::StrCat(prefix_, "other-certs");
    ASSERT_TRUE(
        MakeCertificateWith("--role node", certificates_, "node0", "127.0.0.1 localhost"));
    ASSERT_TRUE(MakeCertificateWith("--role node", certificates_, "node1", "127.0.0.1"));
    ASSERT_TRUE(MakeCertificateWith("--role client", certificates_, "operator", "127.0.0.1"));
    ASSERT_TRUE(MakeCertificateWith("--role node", other_authority_, "intruder", "127.0.0.1"));

    std::vector<std::string> arguments = {"--devices", "cpu:1", "--node-name", "node0",
                                          "--verbose"};
    for (const std::string& flag :
         TlsFlags(CertificateFiles(certificates_, certificates_, "node0")))
      arguments.push_back(flag);
    auto coordinator =
        LoomdProcess::Start(LOOMD_BINARY, arguments, absl::StrCat(prefix_, "coordinator.log"));
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    EXPECT_THAT(coordinator_->Log(), HasSubstr("mutual TLS"));
  }

  void TearDown() override {
    if (HasFailure()) {
      std::cerr << coordinator_->Log() << "\n";
      for (auto& worker : workers_) std::cerr << worker->Log() << "\n";
    }
  }

  // Starts a worker with `tls_flags` (none: plaintext).
  void StartWorker(const std::vector<std::string>& tls_flags) {
    std::vector<std::string> arguments = {
        "--devices",     "cpu:1",
        "--node-name",   absl::StrCat("node", workers_.size() + 1),
        "--coordinator", coordinator_->address(),
        "--verbose"};
    for (const std::string& flag : tls_flags) arguments.push_back(flag);
    auto worker = LoomdProcess::Start(LOOMD_BINARY, arguments,
                                      absl::StrCat(prefix_, "worker-", workers_.size(), ".log"));
    ASSERT_TRUE(worker.ok()) << worker.status();
    workers_.push_back(*std::move(worker));
  }

  // A client of the coordinator, or of `address` when given.
  absl::StatusOr<std::unique_ptr<ClusterClient>> Connect(std::optional<TlsCredentials> tls,
                                                         const std::string& address = "") {
    ClusterClientOptions options;
    options.connect_timeout = absl::Seconds(3);
    options.tls = std::move(tls);
    return ClusterClient::Connect(address.empty() ? coordinator_->address() : address, options);
  }

  std::string prefix_;
  std::string certificates_;
  std::string other_authority_;
  std::unique_ptr<LoomdProcess> coordinator_;
  std::vector<std::unique_ptr<LoomdProcess>> workers_;
};

TEST_F(TlsTest, ACoordinatorAndAWorkerWithCertificatesRunAJobForAClientWithOne) {
  StartWorker(TlsFlags(CertificateFiles(certificates_, certificates_, "node1")));
  absl::StatusOr<std::unique_ptr<ClusterClient>> client =
      Connect(ReadCredentials(CertificateFiles(certificates_, certificates_, "operator")));
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->WaitUntilReady(2, absl::Now() + absl::Seconds(20)).ok());

  gpt::GptConfig config = SmallGpt(3);
  config.data_parallel = 2;
  config.devices_per_node = 1;
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<v1::JobInfo> submitted = (*client)->SubmitJob(*job);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  int losses = 0;
  absl::Status watched = (*client)->WatchJob(submitted->job_id(), [&](const v1::JobEvent& event) {
    if (event.has_step()) ++losses;
  });
  ASSERT_TRUE(watched.ok()) << watched;
  absl::StatusOr<v1::JobInfo> info = (*client)->GetJob(submitted->job_id());
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->state(), v1::JOB_STATE_SUCCEEDED) << info->error().message();
  EXPECT_EQ(losses, 3);

  // The worker forwards the client's calls to the coordinator over its own TLS connection.
  absl::StatusOr<std::unique_ptr<ClusterClient>> through_worker =
      Connect(ReadCredentials(CertificateFiles(certificates_, certificates_, "operator")),
              workers_[0]->address());
  ASSERT_TRUE(through_worker.ok()) << through_worker.status();
  absl::StatusOr<std::vector<v1::NodeInfo>> nodes = (*through_worker)->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ(nodes->size(), 2u);
  absl::StatusOr<v1::JobInfo> forwarded = (*through_worker)->GetJob(submitted->job_id());
  ASSERT_TRUE(forwarded.ok()) << forwarded.status();
  EXPECT_EQ(forwarded->state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(TlsTest, APlaintextClientGetsNoAnswer) {
  absl::StatusOr<std::unique_ptr<ClusterClient>> client = Connect(std::nullopt);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(client.status().message(), HasSubstr("--tls-ca"));
}

TEST_F(TlsTest, AClientWithACertificateOfAnotherAuthorityIsRefused) {
  // It trusts the daemon's authority, so only the daemon's check of its certificate refuses it.
  // (Loom's own clients refuse such files before connecting: tests/rpc/tls_files_test.cc.)
  absl::StatusOr<std::unique_ptr<ClusterClient>> client =
      Connect(ReadUnchecked(CertificateFiles(certificates_, other_authority_, "intruder")));
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(TlsTest, WorkersWithoutACertificateOfTheAuthorityCannotJoin) {
  StartWorker({});
  // A loomd given a certificate of another authority, or a client's certificate of the authority
  // (no node role), does not even start. (Were it to try, the coordinator would refuse it:
  // tests/daemon/authorization_test.cc.)
  for (const auto& [authority, name, says] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {other_authority_, "intruder", "does not verify against --tls-ca"},
           {certificates_, "operator", "without the node role"}}) {
    std::vector<std::string> arguments = {"--devices", "cpu:1", "--coordinator",
                                          coordinator_->address()};
    for (const std::string& flag : TlsFlags(CertificateFiles(certificates_, authority, name))) {
      arguments.push_back(flag);
    }
    absl::StatusOr<std::unique_ptr<LoomdProcess>> refused =
        LoomdProcess::Start(LOOMD_BINARY, arguments, absl::StrCat(prefix_, name, ".log"));
    ASSERT_FALSE(refused.ok()) << name;
    EXPECT_THAT(refused.status().message(), HasSubstr(says));
  }
  absl::StatusOr<std::unique_ptr<ClusterClient>> client =
      Connect(ReadCredentials(CertificateFiles(certificates_, certificates_, "operator")));
  ASSERT_TRUE(client.ok()) << client.status();
  // The plaintext worker retries every second: three seconds give it several tries.
  absl::SleepFor(absl::Seconds(3));
  absl::StatusOr<std::vector<v1::NodeInfo>> nodes = (*client)->ListNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ(nodes->size(), 1u);
  for (auto& worker : workers_) EXPECT_TRUE(worker->Running()) << worker->Log();
  // A worker with a certificate of the authority joins the same cluster.
  StartWorker(TlsFlags(CertificateFiles(certificates_, certificates_, "node1")));
  EXPECT_TRUE((*client)->WaitUntilReady(2, absl::Now() + absl::Seconds(20)).ok());
}

}  // namespace
}  // namespace loom::testing
