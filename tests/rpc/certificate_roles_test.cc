// Roles from certificates (rpc/tls.h): loom://role/ URIs, subject OUs, none (a client's), and the
// refusals RequireRole words, with certificates made by scripts/make-certs.
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/tls.h"
#include "tests/rpc/test_certificates.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

class CertificateRolesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    directory_ = new std::string(absl::StrCat(::testing::TempDir(), "/roles-", getpid()));
    ASSERT_TRUE(testing::MakeCertificateWith("--role node --role admin", *directory_, "local",
                                             "127.0.0.1"));
    ASSERT_TRUE(testing::MakeCertificateWith("--role metrics", *directory_, "prometheus"));
    ASSERT_TRUE(testing::MakeCertificate(*directory_, "alice"));
    ASSERT_TRUE(testing::MakeCertificateWith("--ou admin --ou Engineering", *directory_, "ops"));
    ASSERT_TRUE(testing::MakeCertificateWith("--ou Engineering", *directory_, "bob"));
    ASSERT_TRUE(testing::MakeCertificateWith("--role client --ou admin", *directory_, "carol"));
  }
  static void TearDownTestSuite() { delete directory_; }

  static Caller CallerOfFile(const std::string& name) {
    std::ifstream file(absl::StrCat(*directory_, "/", name, ".pem"));
    std::stringstream pem;
    pem << file.rdbuf();
    absl::StatusOr<Caller> caller = CallerOfCertificate(pem.str());
    EXPECT_TRUE(caller.ok()) << caller.status();
    return caller.value_or(Caller{});
  }

  static std::string* directory_;
};

std::string* CertificateRolesTest::directory_ = nullptr;

TEST_F(CertificateRolesTest, RoleUrisGrantTheirRolesToTheCommonName) {
  const Caller local = CallerOfFile("local");
  EXPECT_TRUE(local.authenticated);
  EXPECT_EQ(local.identity, "local");
  EXPECT_TRUE(local.Has(Role::kNode));
  EXPECT_TRUE(local.Has(Role::kAdmin));
  EXPECT_FALSE(local.Has(Role::kClient));
  EXPECT_FALSE(local.Has(Role::kMetrics));
  EXPECT_EQ(local.Describe(), "'local' (roles node, admin)");

  const Caller prometheus = CallerOfFile("prometheus");
  EXPECT_EQ(prometheus.roles, static_cast<uint32_t>(Role::kMetrics));
  EXPECT_EQ(prometheus.Describe(), "metrics 'prometheus'");
}

TEST_F(CertificateRolesTest, ACertificateWithoutARoleIsAClients) {
  const Caller alice = CallerOfFile("alice");
  EXPECT_EQ(alice.roles, static_cast<uint32_t>(Role::kClient));
  EXPECT_EQ(alice.Describe(), "client 'alice'");
  // OUs that are no role name grant nothing either.
  EXPECT_EQ(CallerOfFile("bob").roles, static_cast<uint32_t>(Role::kClient));
}

TEST_F(CertificateRolesTest, OusGrantRolesUnlessTheCertificateHasRoleUris) {
  EXPECT_EQ(CallerOfFile("ops").roles, static_cast<uint32_t>(Role::kAdmin));
  // A loom://role/ URI wins over the OU.
  EXPECT_EQ(CallerOfFile("carol").roles, static_cast<uint32_t>(Role::kClient));
}

TEST_F(CertificateRolesTest, RequireRoleNamesTheCallerItsRolesAndWhatItNeeded) {
  const Caller alice = CallerOfFile("alice");
  absl::Status refused = RequireRole(alice, {Role::kNode}, "register as a node");
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(refused.message(),
            "client 'alice' may not register as a node: that needs a certificate with role node "
            "(loom://role/node)");
  absl::Status metrics =
      RequireRole(CallerOfFile("prometheus"), {Role::kClient, Role::kAdmin}, "submit jobs");
  EXPECT_EQ(metrics.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(metrics.message(), HasSubstr("metrics 'prometheus' may not submit jobs"));
  EXPECT_THAT(metrics.message(), HasSubstr("role client or admin"));
  EXPECT_TRUE(RequireRole(alice, {Role::kClient, Role::kAdmin}, "submit jobs").ok());
}

TEST_F(CertificateRolesTest, APlaintextCallerHoldsEveryRole) {
  const Caller plaintext = Caller::Plaintext();
  EXPECT_FALSE(plaintext.authenticated);
  for (Role role : kRoles) EXPECT_TRUE(plaintext.Has(role)) << RoleName(role);
  EXPECT_TRUE(RequireRole(plaintext, {Role::kNode}, "register as a node").ok());
  EXPECT_EQ(plaintext.Describe(), "a plaintext caller");
}

TEST_F(CertificateRolesTest, AnUnreadableCertificateIsInvalid) {
  EXPECT_EQ(CallerOfCertificate("not a certificate").status().code(),
            absl::StatusCode::kInvalidArgument);
  // A caller with no role may do nothing.
  Caller nobody;
  nobody.authenticated = true;
  nobody.identity = "x";
  EXPECT_EQ(nobody.Describe(), "'x' (no role)");
  EXPECT_EQ(RequireRole(nobody, {Role::kClient}, "list jobs").code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace loom
