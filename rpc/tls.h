#ifndef LOOM_RPC_TLS_H_
#define LOOM_RPC_TLS_H_

// Mutual TLS for Loom's gRPC connections and loomd's /metrics server: TlsCredentials (PEM contents)
// read and checked from the --tls-ca, --tls-cert and --tls-key files (ReadTlsFiles), gRPC channel
// and server credentials made from them, the same set-up on an OpenSSL server context
// (ConfigureMutualTlsServer), and authorization by role: the Caller of a server call (identity and
// roles from its certificate, or from a forwarding node), RequireRole. Without credentials,
// connections are plaintext and every caller holds every role.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_context.h"

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

// Authorization by role (docs/OPERATIONS.md, "Security"). A certificate grants roles: each URI
// subject alternative name loom://role/NAME grants NAME; a certificate with no such URI takes its
// roles from its subject's OU attributes that are role names (others are ignored), so the URIs win
// when both are present. A certificate with neither is a client's. Its identity is its subject's
// CN (a certificate without one is refused everything).
enum class Role : uint32_t {
  kNode = 1,     // a loomd: may register as a worker (NodeService) and forward others' calls
  kClient = 2,   // may submit jobs, and see, watch, fetch, trace and cancel its own
  kAdmin = 4,    // may do what a client does, on every job
  kMetrics = 8,  // may scrape /metrics and check health, nothing else
};
// "node", "client", "admin", "metrics".
absl::string_view RoleName(Role role);
// Every role, in the order above.
inline constexpr Role kRoles[] = {Role::kNode, Role::kClient, Role::kAdmin, Role::kMetrics};

// Who made a call.
struct Caller {
  // The certificate's subject CN; empty for a plaintext caller.
  std::string identity;
  // The roles, a mask of Role values.
  uint32_t roles = 0;
  // From a certificate (mutual TLS); false: plaintext, which holds every role.
  bool authenticated = false;

  // A caller over plaintext (no --tls-*): every role.
  static Caller Plaintext();
  bool Has(Role role) const { return (roles & static_cast<uint32_t>(role)) != 0; }
  // "client 'alice'", "'ops' (roles admin, node)", "'x' (no role)", "a plaintext caller".
  std::string Describe() const;
};

// The caller a certificate (PEM, the first certificate in it) stands for. INVALID_ARGUMENT when it
// does not parse or has no subject CN.
absl::StatusOr<Caller> CallerOfCertificate(absl::string_view pem);

// The metadata a node (a worker loomd) adds to a call it forwards to its coordinator on behalf of
// its own caller: the caller's identity (binary metadata) and roles ("client,admin").
inline constexpr char kForwardedIdentityKey[] = "loom-forwarded-identity-bin";
inline constexpr char kForwardedRolesKey[] = "loom-forwarded-roles";

// The caller of a server call: plaintext (no TLS), or the peer's certificate (x509_pem_cert of the
// call's AuthContext). When the peer holds the node role and the call carries the forwarded
// metadata, the caller is the one the node forwarded for; from any other peer that metadata is
// ignored. A certificate that cannot be read is a caller with no role.
Caller CallerOf(const grpc::ServerContext& context);
// Adds `caller` as the forwarded metadata of a call a node makes on its behalf.
void AddForwardedCaller(const Caller& caller, grpc::ClientContext* context);

// OK when `caller` holds one of `allowed`; PERMISSION_DENIED otherwise, naming the caller's
// identity and roles, `action` ("submit jobs") and the roles that may.
absl::Status RequireRole(const Caller& caller, std::initializer_list<Role> allowed,
                         absl::string_view action);

}  // namespace loom

#endif  // LOOM_RPC_TLS_H_
