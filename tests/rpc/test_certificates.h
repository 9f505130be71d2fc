#ifndef LOOM_TESTS_RPC_TEST_CERTIFICATES_H_
#define LOOM_TESTS_RPC_TEST_CERTIFICATES_H_

// Test certificates from scripts/make-certs (with roles or without), and reading them back as
// TlsCredentials.

#include <optional>
#include <string>

#include "rpc/tls.h"

namespace loom::testing {

// `scripts/make-certs DIRECTORY NAME HOSTS`: DIRECTORY/NAME.pem and NAME.key, signed by
// DIRECTORY/ca.pem (which the first call in a directory makes). False when it failed.
bool MakeCertificate(const std::string& directory, const std::string& name,
                     const std::string& hosts = "");
// The same with make-certs' `options` (e.g. "--role node --role admin", "--ou admin"): a
// certificate with roles (rpc/tls.h). MakeCertificate's has none: a client's.
bool MakeCertificateWith(const std::string& options, const std::string& directory,
                         const std::string& name, const std::string& hosts = "");

// The authority of `authority_directory`, and NAME's certificate and key in `directory`.
TlsFiles CertificateFiles(const std::string& authority_directory, const std::string& directory,
                          const std::string& name);

// ReadTlsFiles(files), failing the test (and nullopt) when it does not read three good files.
std::optional<TlsCredentials> ReadCredentials(const TlsFiles& files);

}  // namespace loom::testing

#endif  // LOOM_TESTS_RPC_TEST_CERTIFICATES_H_
