// ReadTlsFiles: the checks at start that name the flag and the file, with certificates made by
// scripts/make-certs.
#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rpc/tls.h"
#include "tests/rpc/test_certificates.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

class TlsFilesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    directory_ = new std::string(absl::StrCat(::testing::TempDir(), "/tls-files-", getpid()));
    other_ = new std::string(*directory_ + "-other");
    ASSERT_TRUE(testing::MakeCertificate(*directory_, "node", "127.0.0.1"));
    ASSERT_TRUE(testing::MakeCertificate(*directory_, "second"));
    ASSERT_TRUE(testing::MakeCertificate(*other_, "stranger", "127.0.0.1"));
  }
  static void TearDownTestSuite() {
    delete directory_;
    delete other_;
  }

  static std::string In(const std::string& directory, const std::string& file) {
    return absl::StrCat(directory, "/", file);
  }

  static std::string* directory_;
  static std::string* other_;
};

std::string* TlsFilesTest::directory_ = nullptr;
std::string* TlsFilesTest::other_ = nullptr;

TEST_F(TlsFilesTest, NoneIsPlaintextAndSomeAreRefused) {
  absl::StatusOr<std::optional<TlsCredentials>> none = ReadTlsFiles({});
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  absl::StatusOr<std::optional<TlsCredentials>> some =
      ReadTlsFiles({In(*directory_, "ca.pem"), "", ""});
  EXPECT_EQ(some.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(some.status().message(), HasSubstr("go together"));
}

TEST_F(TlsFilesTest, ACertificateItsKeyAndItsAuthorityAreRead) {
  absl::StatusOr<std::optional<TlsCredentials>> tls = ReadTlsFiles(
      {In(*directory_, "ca.pem"), In(*directory_, "node.pem"), In(*directory_, "node.key")});
  ASSERT_TRUE(tls.ok()) << tls.status();
  ASSERT_TRUE(tls->has_value());
  EXPECT_THAT((*tls)->authority, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_THAT((*tls)->certificate, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_THAT((*tls)->private_key, HasSubstr("PRIVATE KEY"));
}

TEST_F(TlsFilesTest, AnotherCertificatesKeyIsRefusedNamingTheKey) {
  absl::Status status = ReadTlsFiles({In(*directory_, "ca.pem"), In(*directory_, "node.pem"),
                                      In(*directory_, "second.key")})
                            .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat("--tls-key: '", In(*directory_, "second.key"),
                                     "' is not the key of --tls-cert")));
}

TEST_F(TlsFilesTest, ACertificateOfAnotherAuthorityIsRefusedNamingBoth) {
  absl::Status status = ReadTlsFiles({In(*directory_, "ca.pem"), In(*other_, "stranger.pem"),
                                      In(*other_, "stranger.key")})
                            .status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("--tls-cert: '", In(*other_, "stranger.pem"),
                                                       "' does not verify against --tls-ca '",
                                                       In(*directory_, "ca.pem"), "'")));
}

TEST_F(TlsFilesTest, FilesWithoutCertificatesOrKeysAreRefusedNamingThem) {
  const std::string garbage = In(*directory_, "garbage.pem");
  std::ofstream(garbage) << "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n";
  const std::string text = In(*directory_, "text.pem");
  std::ofstream(text) << "no PEM here\n";
  const std::string authority = In(*directory_, "ca.pem");
  const std::string certificate = In(*directory_, "node.pem");
  const std::string key = In(*directory_, "node.key");
  EXPECT_THAT(ReadTlsFiles({garbage, certificate, key}).status().message(),
              HasSubstr(absl::StrCat("--tls-ca: '", garbage, "' holds no certificate")));
  EXPECT_THAT(ReadTlsFiles({authority, garbage, key}).status().message(),
              HasSubstr(absl::StrCat("--tls-cert: '", garbage, "' holds no certificate")));
  EXPECT_THAT(ReadTlsFiles({authority, certificate, certificate}).status().message(),
              HasSubstr(absl::StrCat("--tls-key: '", certificate, "' holds no private key")));
  EXPECT_THAT(ReadTlsFiles({authority, certificate, text}).status().message(),
              HasSubstr(absl::StrCat("--tls-key: '", text, "' holds no PEM block")));
  EXPECT_THAT(ReadTlsFiles({authority, In(*directory_, "absent.pem"), key}).status().message(),
              HasSubstr(absl::StrCat("--tls-cert: cannot read '", In(*directory_, "absent.pem"))));
}

}  // namespace
}  // namespace loom
