// /metrics over HTTPS with mutual TLS: a daemon with --tls-* serves its metrics only to scrapers
// that present a certificate of its authority (certificates from scripts/make-certs), unless
// --metrics-plaintext.
#include <unistd.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/daemon.h"
#include "daemon/metrics.h"
#include "daemon/metrics_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "rpc/tls.h"
#include "tests/rpc/test_certificates.h"
#include "tests/daemon/daemon_test_util.h"

namespace loom::daemon {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

class MetricsTlsTest : public ::testing::Test {
 protected:
  // One authority with a certificate for the daemon (naming 127.0.0.1) and one for a scraper;
  // another authority with a scraper of its own.
  static void SetUpTestSuite() {
    directory_ = new std::string(absl::StrCat(::testing::TempDir(), "/metrics-tls-", getpid()));
    other_ = new std::string(*directory_ + "-other");
    ASSERT_TRUE(loom::testing::MakeCertificate(*directory_, "daemon", "127.0.0.1"));
    ASSERT_TRUE(loom::testing::MakeCertificate(*directory_, "scraper"));
    ASSERT_TRUE(loom::testing::MakeCertificate(*other_, "stranger"));
  }
  static void TearDownTestSuite() {
    delete directory_;
    delete other_;
  }

  static std::string In(const std::string& directory, const std::string& file) {
    return absl::StrCat(directory, "/", file);
  }

  static TlsCredentials DaemonCredentials() {
    return loom::testing::ReadCredentials(
               loom::testing::CertificateFiles(*directory_, *directory_, "daemon"))
        .value_or(TlsCredentials{});
  }

  // GET /metrics over HTTPS, checking the server's certificate against our authority, presenting
  // `name`'s certificate from `directory` (none when `name` is empty).
  static httplib::Result Scrape(const MetricsServer& server, const std::string& directory,
                                const std::string& name) {
    std::unique_ptr<httplib::SSLClient> client;
    if (name.empty()) {
      client = std::make_unique<httplib::SSLClient>("127.0.0.1", server.port());
    } else {
      client = std::make_unique<httplib::SSLClient>(
          "127.0.0.1", server.port(), In(directory, name + ".pem"), In(directory, name + ".key"));
    }
    client->set_ca_cert_path(In(*directory_, "ca.pem").c_str());
    client->enable_server_certificate_verification(true);
    client->set_connection_timeout(5);
    client->set_read_timeout(10);
    return client->Get("/metrics");
  }

  void SetUp() override {
    metrics_ = std::make_shared<DaemonMetrics>();
    metrics_->AddActs(plan::COMPUTE, 7);
    absl::StatusOr<std::unique_ptr<MetricsServer>> server =
        MetricsServer::Start("127.0.0.1:0", {metrics_->registry()}, DaemonCredentials());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  static std::string* directory_;
  static std::string* other_;
  std::shared_ptr<DaemonMetrics> metrics_;
  std::unique_ptr<MetricsServer> server_;
};

std::string* MetricsTlsTest::directory_ = nullptr;
std::string* MetricsTlsTest::other_ = nullptr;

TEST_F(MetricsTlsTest, AScraperWithACertificateOfTheAuthorityGetsTheMetrics) {
  EXPECT_EQ(server_->url(), absl::StrCat("https://", server_->address(), "/metrics"));
  httplib::Result result = Scrape(*server_, *directory_, "scraper");
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_EQ(result->status, 200);
  EXPECT_THAT(result->body, HasSubstr("loom_actor_acts_total{kind=\"compute\"} 7"));
}

TEST_F(MetricsTlsTest, AScraperWithoutACertificateIsRefused) {
  httplib::Result result = Scrape(*server_, *directory_, "");
  EXPECT_FALSE(result) << "status " << result->status;
}

TEST_F(MetricsTlsTest, AScraperWithAnotherAuthoritysCertificateIsRefused) {
  httplib::Result result = Scrape(*server_, *other_, "stranger");
  EXPECT_FALSE(result) << "status " << result->status;
}

TEST_F(MetricsTlsTest, PlainHttpGetsNoMetrics) {
  httplib::Client client(absl::StrCat("http://", server_->address()));
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  httplib::Result result = client.Get("/metrics");
  if (result) {
    EXPECT_THAT(result->body, ::testing::Not(HasSubstr("loom_actor_acts_total")));
  }
  // And the server still serves a proper scraper afterwards.
  httplib::Result scraped = Scrape(*server_, *directory_, "scraper");
  ASSERT_TRUE(scraped) << httplib::to_string(scraped.error());
  EXPECT_EQ(scraped->status, 200);
}

TEST_F(MetricsTlsTest, CredentialsOpenSslRefusesAreAClearError) {
  TlsCredentials broken = DaemonCredentials();
  broken.private_key = "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n";
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1:0", {metrics_->registry()}, broken);
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("private key"));
}

TEST_F(MetricsTlsTest, ADaemonWithTlsServesHttpsUnlessToldPlaintext) {
  DaemonOptions options = testing::TestOptions();
  options.metrics_listen_address = "127.0.0.1:0";
  options.tls = DaemonCredentials();
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_THAT((*daemon)->metrics_url(), StartsWith("https://127.0.0.1:"));
  daemon->reset();

  options.metrics_plaintext = true;
  daemon = Daemon::Start(options);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_THAT((*daemon)->metrics_url(), StartsWith("http://127.0.0.1:"));
  httplib::Client client(absl::StrCat("http://", (*daemon)->metrics_address()));
  client.set_connection_timeout(5);
  client.set_read_timeout(10);
  httplib::Result result = client.Get("/metrics");
  ASSERT_TRUE(result) << httplib::to_string(result.error());
  EXPECT_THAT(result->body, HasSubstr("loom_actor_acts_total"));
}

}  // namespace
}  // namespace loom::daemon
