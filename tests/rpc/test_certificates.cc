#include "tests/rpc/test_certificates.h"

#include <cstdlib>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace loom::testing {

bool MakeCertificate(const std::string& directory, const std::string& name,
                     const std::string& hosts) {
  return MakeCertificateWith("", directory, name, hosts);
}

bool MakeCertificateWith(const std::string& options, const std::string& directory,
                         const std::string& name, const std::string& hosts) {
  const std::string command = absl::StrCat(LOOM_SOURCE_DIR, "/scripts/make-certs ", options, " '",
                                           directory, "' ", name, " ", hosts, " >/dev/null");
  return std::system(command.c_str()) == 0;
}

TlsFiles CertificateFiles(const std::string& authority_directory, const std::string& directory,
                          const std::string& name) {
  return {absl::StrCat(authority_directory, "/ca.pem"), absl::StrCat(directory, "/", name, ".pem"),
          absl::StrCat(directory, "/", name, ".key")};
}

std::optional<TlsCredentials> ReadCredentials(const TlsFiles& files) {
  absl::StatusOr<std::optional<TlsCredentials>> tls = ReadTlsFiles(files);
  EXPECT_TRUE(tls.ok() && tls->has_value()) << tls.status();
  return tls.ok() ? *tls : std::nullopt;
}

}  // namespace loom::testing
