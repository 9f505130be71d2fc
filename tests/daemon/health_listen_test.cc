// --health-listen: a daemon serving mutual TLS also answers grpc.health.v1.Health, and nothing
// else, in plaintext on a second address (what Kubernetes' gRPC probes need: they present no
// certificate).
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "client/raw_unary_call.h"
#include "daemon/daemon.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "rpc/tls.h"
#include "tests/rpc/test_certificates.h"
#include "tests/daemon/daemon_test_util.h"

namespace loom::daemon {
namespace {

using testing::ContextWithDeadline;
using ::testing::HasSubstr;
using testing::HealthCheckRequest;
using testing::kHealthServing;

class HealthListenTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    directory_ = new std::string(absl::StrCat(::testing::TempDir(), "/health-listen-", getpid()));
    ASSERT_TRUE(loom::testing::MakeCertificate(*directory_, "daemon", "127.0.0.1"));
  }
  static void TearDownTestSuite() { delete directory_; }

  // A daemon with mutual TLS on its main address and --health-listen 127.0.0.1:0.
  void SetUp() override {
    DaemonOptions options = testing::TestOptions();
    options.tls = loom::testing::ReadCredentials(
        loom::testing::CertificateFiles(*directory_, *directory_, "daemon"));
    ASSERT_TRUE(options.tls.has_value());
    options.health_listen_address = "127.0.0.1:0";
    absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = *std::move(daemon);
  }

  // A plaintext unary call of `method` on `address`.
  static grpc::Status PlaintextCall(const std::string& address, const std::string& method,
                                    const std::string& request, std::string* response) {
    std::unique_ptr<grpc::ClientContext> context = ContextWithDeadline(absl::Seconds(5));
    return RawUnaryCall(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()),
                        context.get(), method, request, response);
  }

  static std::string* directory_;
  std::unique_ptr<Daemon> daemon_;
};

std::string* HealthListenTest::directory_ = nullptr;

TEST_F(HealthListenTest, ThePlaintextAddressAnswersHealthChecksAsTheServer) {
  const std::string address = daemon_->health_address();
  ASSERT_THAT(address, ::testing::StartsWith("127.0.0.1:"));
  EXPECT_NE(address, daemon_->address());
  for (const std::string service : {"", "loom.v1.JobService", "loom.v1.ClusterService"}) {
    std::string response;
    grpc::Status status = PlaintextCall(address, "/grpc.health.v1.Health/Check",
                                        HealthCheckRequest(service), &response);
    ASSERT_TRUE(status.ok()) << "'" << service << "': " << status.error_message();
    EXPECT_EQ(response, kHealthServing) << "'" << service << "'";
  }
}

TEST_F(HealthListenTest, ThePlaintextAddressServesNothingElse) {
  std::string response;
  grpc::Status status =
      PlaintextCall(daemon_->health_address(), "/loom.v1.JobService/ListJobs", "", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  status =
      PlaintextCall(daemon_->health_address(), "/loom.v1.ClusterService/ListNodes", "", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  // The main address stays mutual TLS, health checks included.
  status = PlaintextCall(daemon_->address(), "/grpc.health.v1.Health/Check", "", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(HealthListenTest, AfterShutdownThePlaintextAddressIsClosed) {
  const std::string address = daemon_->health_address();
  daemon_->Shutdown(absl::ZeroDuration());
  std::string response;
  grpc::Status status = PlaintextCall(address, "/grpc.health.v1.Health/Check", "", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(HealthListenTest, AnAddressInUseIsAnErrorNamingTheFlag) {
  DaemonOptions options = testing::TestOptions();
  options.health_listen_address = daemon_->health_address();  // taken by the first daemon
  absl::StatusOr<std::unique_ptr<Daemon>> second = Daemon::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("--health-listen"));
  EXPECT_THAT(second.status().message(), HasSubstr(daemon_->health_address()));
}

}  // namespace
}  // namespace loom::daemon
