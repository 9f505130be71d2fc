#ifndef LOOM_RPC_TLS_H_
#define LOOM_RPC_TLS_H_

// Mutual TLS for Loom's gRPC connections and loomd's /metrics server: TlsCredentials (PEM contents)
// read and checked from the --tls-ca, --tls-cert and --tls-key files (ReadTlsFiles), gRPC channel
// and server credentials made from them, and the same set-up on an OpenSSL server context
// (ConfigureMutualTlsServer). Without credentials, connections are plaintext.

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

// OpenSSL's SSL_CTX, for ConfigureMutualTlsServer.
struct ssl_ctx_st;

namespace loom {

// Mutual TLS for Loom's gRPC connections (loomctl and programs to the coordinator, workers to the
// coordinator): every party holds a certificate signed by one certificate authority, presents it,
// and accepts only peers whose certificate that authority signed. PEM contents, not paths.
struct TlsCredentials {
  std::string authority;    // the CA's certificate(s)
  std::string certificate;  // this party's certificate chain
  std::string private_key;  // this party's key
};

// The paths given on a command line (--tls-ca, --tls-cert, --tls-key).
struct TlsFiles {
  std::string authority_path;
  std::string certificate_path;
  std::string private_key_path;
};

// Reads the three files: nullopt when no path is given (plaintext). INVALID_ARGUMENT naming the
// flag and the file when only some are given, a file cannot be read or holds no certificate or
// key, the key is not the certificate's, or the certificate does not verify against the authority
// (another authority's, expired): what gRPC would only report as a server that cannot start or a
// connection that never comes up. Checked with OpenSSL, which gRPC uses on Debian.
absl::StatusOr<std::optional<TlsCredentials>> ReadTlsFiles(const TlsFiles& files);

// Credentials for a channel to a server: TLS with `tls`, checking the server's certificate against
// the host of the address it is reached at; insecure without.
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const std::optional<TlsCredentials>& tls);
// Credentials for a server: TLS with `tls`, requiring and verifying every client's certificate;
// insecure without.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const std::optional<TlsCredentials>& tls);

// Sets up an OpenSSL server context as MakeServerCredentials sets up gRPC's, for a server that is
// not gRPC's (loomd's /metrics): TLS 1.2 or later, `tls`'s certificate chain and key, and every
// client required to present a certificate that `tls`'s authority signed. INVALID_ARGUMENT when
// the credentials do not parse or the key is not the certificate's (ReadTlsFiles rules both out).
absl::Status ConfigureMutualTlsServer(const TlsCredentials& tls, ssl_ctx_st* context);

}  // namespace loom

#endif  // LOOM_RPC_TLS_H_
