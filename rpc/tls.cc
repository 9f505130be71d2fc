#include "rpc/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/security/auth_context.h"

namespace loom {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* certificate) const { X509_free(certificate); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct StoreFree {
  void operator()(X509_STORE* store) const { X509_STORE_free(store); }
};
struct StoreContextFree {
  void operator()(X509_STORE_CTX* context) const { X509_STORE_CTX_free(context); }
};
using Certificate = std::unique_ptr<X509, X509Free>;

struct GeneralNamesFree {
  void operator()(GENERAL_NAMES* names) const { GENERAL_NAMES_free(names); }
};

std::unique_ptr<BIO, BioFree> MemoryOf(absl::string_view pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every certificate in `pem`, in order.
std::vector<Certificate> ParseCertificates(absl::string_view pem) {
  std::vector<Certificate> certificates;
  auto memory = MemoryOf(pem);
  while (X509* certificate = PEM_read_bio_X509(memory.get(), nullptr, nullptr, nullptr)) {
    certificates.emplace_back(certificate);
  }
  ERR_clear_error();  // the end of the input reads as an error
  return certificates;
}

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read '", path, "'"));
  }
  std::stringstream contents;
  contents << file.rdbuf();
  if (!absl::StrContains(contents.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", path, "' holds no PEM block (-----BEGIN ...)"));
  }
  return contents.str();
}

// What gRPC would only report as a server that cannot start or a connection that never comes
// up: certificates that do not parse, a key that is not the certificate's, a certificate the
// authority did not sign (or that expired).
absl::Status Check(const TlsCredentials& tls, const TlsFiles& files) {
  std::vector<Certificate> authorities = ParseCertificates(tls.authority);
  if (authorities.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-ca: '", files.authority_path, "' holds no certificate"));
  }
  std::vector<Certificate> chain = ParseCertificates(tls.certificate);
  if (chain.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert: '", files.certificate_path, "' holds no certificate"));
  }
  auto memory = MemoryOf(tls.private_key);
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(memory.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key: '", files.private_key_path, "' holds no private key (or one with a password)"));
  }
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("--tls-key: '", files.private_key_path,
                                                   "' is not the key of --tls-cert '",
                                                   files.certificate_path, "'"));
  }
  std::unique_ptr<X509_STORE, StoreFree> store(X509_STORE_new());
  for (const Certificate& authority : authorities)
    X509_STORE_add_cert(store.get(), authority.get());
  STACK_OF(X509)* intermediates = sk_X509_new_null();
  for (size_t index = 1; index < chain.size(); ++index)
    sk_X509_push(intermediates, chain[index].get());
  std::unique_ptr<X509_STORE_CTX, StoreContextFree> context(X509_STORE_CTX_new());
  X509_STORE_CTX_init(context.get(), store.get(), chain.front().get(), intermediates);
  const bool verified = X509_verify_cert(context.get()) == 1;
  const int error = X509_STORE_CTX_get_error(context.get());
  sk_X509_free(intermediates);  // the certificates stay owned by `chain`
  ERR_clear_error();
  if (!verified) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-cert: '", files.certificate_path, "' does not verify against --tls-ca '",
        files.authority_path, "': ", X509_verify_cert_error_string(error)));
  }
  return absl::OkStatus();
}

// The URI of a subject alternative name that grants a role: kRoleUriPrefix + the role's name.
constexpr absl::string_view kRoleUriPrefix = "loom://role/";
// The longest identity a message quotes (a CN holds at most 64 characters).
constexpr size_t kMaxQuotedIdentity = 64;

std::optional<Role> RoleNamed(absl::string_view name) {
  for (Role role : kRoles) {
    if (RoleName(role) == name) return role;
  }
  return std::nullopt;
}

std::string StringOf(const ASN1_STRING* value) {
  if (value == nullptr) return "";
  unsigned char* utf8 = nullptr;
  const int length = ASN1_STRING_to_UTF8(&utf8, value);
  if (length < 0) {
    ERR_clear_error();
    return "";
  }
  std::string text(reinterpret_cast<const char*>(utf8), static_cast<size_t>(length));
  OPENSSL_free(utf8);
  return text;
}

// Every value of attribute `nid` of `name`.
std::vector<std::string> NameEntries(const X509_NAME* name, int nid) {
  std::vector<std::string> values;
  for (int index = X509_NAME_get_index_by_NID(name, nid, -1); index >= 0;
       index = X509_NAME_get_index_by_NID(name, nid, index)) {
    values.push_back(StringOf(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, index))));
  }
  return values;
}

// The certificate's URI subject alternative names.
std::vector<std::string> UriNames(X509* certificate) {
  std::vector<std::string> uris;
  std::unique_ptr<GENERAL_NAMES, GeneralNamesFree> names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(certificate, NID_subject_alt_name, nullptr, nullptr)));
  ERR_clear_error();
  if (names == nullptr) return uris;
  for (int index = 0; index < sk_GENERAL_NAME_num(names.get()); ++index) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), index);
    if (name->type == GEN_URI) uris.push_back(StringOf(name->d.uniformResourceIdentifier));
  }
  return uris;
}

// "node,admin" for a mask of roles.
std::string RoleList(uint32_t roles, absl::string_view separator) {
  std::vector<absl::string_view> names;
  for (Role role : kRoles) {
    if ((roles & static_cast<uint32_t>(role)) != 0) names.push_back(RoleName(role));
  }
  return absl::StrJoin(names, separator);
}

uint32_t RolesOfList(absl::string_view list) {
  uint32_t roles = 0;
  for (absl::string_view name : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    if (std::optional<Role> role = RoleNamed(absl::StripAsciiWhitespace(name))) {
      roles |= static_cast<uint32_t>(*role);
    }
  }
  return roles;
}

// An identity as messages quote it: printable ASCII, at most kMaxQuotedIdentity characters.
std::string Quoted(absl::string_view identity) {
  std::string quoted;
  for (char c : identity.substr(0, kMaxQuotedIdentity)) {
    quoted.push_back(absl::ascii_isprint(static_cast<unsigned char>(c)) ? c : '?');
  }
  if (identity.size() > kMaxQuotedIdentity) quoted += "...";
  return absl::StrCat("'", quoted, "'");
}

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kNode:
      return "node";
    case Role::kClient:
      return "client";
    case Role::kAdmin:
      return "admin";
    case Role::kMetrics:
      return "metrics";
  }
  return "unknown";
}

Caller Caller::Plaintext() {
  Caller caller;
  for (Role role : kRoles) caller.roles |= static_cast<uint32_t>(role);
  return caller;
}

std::string Caller::Describe() const {
  if (!authenticated) return "a plaintext caller";
  int count = 0;
  for (Role role : kRoles) count += Has(role) ? 1 : 0;
  if (count == 1) return absl::StrCat(RoleList(roles, ""), " ", Quoted(identity));
  if (count == 0) return absl::StrCat(Quoted(identity), " (no role)");
  return absl::StrCat(Quoted(identity), " (roles ", RoleList(roles, ", "), ")");
}

absl::StatusOr<Caller> CallerOfCertificate(absl::string_view pem) {
  std::vector<Certificate> chain = ParseCertificates(pem);
  if (chain.empty()) return absl::InvalidArgumentError("the peer's certificate does not parse");
  X509* certificate = chain.front().get();
  const X509_NAME* subject = X509_get_subject_name(certificate);
  std::vector<std::string> common_names = NameEntries(subject, NID_commonName);
  if (common_names.empty() || common_names.front().empty()) {
    return absl::InvalidArgumentError("the peer's certificate has no subject CN (its identity)");
  }
  Caller caller;
  caller.authenticated = true;
  caller.identity = common_names.front();
  bool role_uris = false;
  for (const std::string& uri : UriNames(certificate)) {
    absl::string_view name = uri;
    if (!absl::ConsumePrefix(&name, kRoleUriPrefix)) continue;
    role_uris = true;
    if (std::optional<Role> role = RoleNamed(name)) caller.roles |= static_cast<uint32_t>(*role);
  }
  if (!role_uris) {
    for (const std::string& unit : NameEntries(subject, NID_organizationalUnitName)) {
      if (std::optional<Role> role = RoleNamed(unit)) caller.roles |= static_cast<uint32_t>(*role);
    }
    if (caller.roles == 0) caller.roles = static_cast<uint32_t>(Role::kClient);
  }
  return caller;
}

Caller CallerOf(const grpc::ServerContext& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return Caller::Plaintext();
  std::vector<grpc::string_ref> pems = auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  std::vector<grpc::string_ref> names = auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
  Caller peer;
  peer.authenticated = true;
  if (!names.empty()) peer.identity.assign(names.front().data(), names.front().size());
  if (!pems.empty()) {
    absl::StatusOr<Caller> certificate =
        CallerOfCertificate(absl::string_view(pems.front().data(), pems.front().size()));
    if (certificate.ok()) peer = *std::move(certificate);
  }
  if (!peer.Has(Role::kNode)) return peer;
  const auto& metadata = context.client_metadata();
  auto identity = metadata.find(kForwardedIdentityKey);
  auto roles = metadata.find(kForwardedRolesKey);
  if (identity == metadata.end() || roles == metadata.end()) return peer;
  Caller forwarded;
  forwarded.authenticated = true;
  forwarded.identity.assign(identity->second.data(), identity->second.size());
  forwarded.roles = RolesOfList(absl::string_view(roles->second.data(), roles->second.size()));
  return forwarded;
}

void AddForwardedCaller(const Caller& caller, grpc::ClientContext* context) {
  context->AddMetadata(kForwardedIdentityKey, caller.identity);
  context->AddMetadata(kForwardedRolesKey, RoleList(caller.roles, ","));
}

absl::Status RequireRole(const Caller& caller, std::initializer_list<Role> allowed,
                         absl::string_view action) {
  uint32_t mask = 0;
  for (Role role : allowed) mask |= static_cast<uint32_t>(role);
  if ((caller.roles & mask) != 0) return absl::OkStatus();
  std::vector<std::string> uris;
  for (Role role : allowed) uris.push_back(absl::StrCat(kRoleUriPrefix, RoleName(role)));
  return absl::PermissionDeniedError(
      absl::StrCat(caller.Describe(), " may not ", action, ": that needs a certificate with role ",
                   RoleList(mask, " or "), " (", absl::StrJoin(uris, " or "), ")"));
}

absl::StatusOr<std::optional<TlsCredentials>> ReadTlsFiles(const TlsFiles& files) {
  const int given = !files.authority_path.empty() + !files.certificate_path.empty() +
                    !files.private_key_path.empty();
  if (given == 0) return std::nullopt;
  if (given != 3) {
    return absl::InvalidArgumentError(
        "--tls-ca, --tls-cert and --tls-key go together: give all three (mutual TLS) or none "
        "(plaintext)");
  }
  TlsCredentials tls;
  for (auto [flag, path, target] : {
           std::tuple{"--tls-ca", &files.authority_path, &tls.authority},
           std::tuple{"--tls-cert", &files.certificate_path, &tls.certificate},
           std::tuple{"--tls-key", &files.private_key_path, &tls.private_key},
       }) {
    absl::StatusOr<std::string> pem = ReadPem(flag, *path);
    if (!pem.ok()) return pem.status();
    *target = *std::move(pem);
  }
  if (absl::Status checked = Check(tls, files); !checked.ok()) return checked;
  return tls;
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const std::optional<TlsCredentials>& tls) {
  if (!tls.has_value()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = tls->authority;
  options.pem_cert_chain = tls->certificate;
  options.pem_private_key = tls->private_key;
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const std::optional<TlsCredentials>& tls) {
  if (!tls.has_value()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = tls->authority;
  options.pem_key_cert_pairs.push_back({tls->private_key, tls->certificate});
  return grpc::SslServerCredentials(options);
}

absl::Status ConfigureMutualTlsServer(const TlsCredentials& tls, SSL_CTX* context) {
  std::vector<Certificate> authorities = ParseCertificates(tls.authority);
  std::vector<Certificate> chain = ParseCertificates(tls.certificate);
  auto memory = MemoryOf(tls.private_key);
  std::unique_ptr<EVP_PKEY, KeyFree> key(
      PEM_read_bio_PrivateKey(memory.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (authorities.empty() || chain.empty() || key == nullptr) {
    return absl::InvalidArgumentError(
        "TLS server: the credentials hold no authority, certificate or private key");
  }
  // Each call takes its own reference: the context keeps what it needs after these are freed.
  bool configured = SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION) == 1 &&
                    SSL_CTX_use_certificate(context, chain.front().get()) == 1;
  for (size_t index = 1; configured && index < chain.size(); ++index) {
    configured = SSL_CTX_add1_chain_cert(context, chain[index].get()) == 1;
  }
  configured = configured && SSL_CTX_use_PrivateKey(context, key.get()) == 1 &&
               SSL_CTX_check_private_key(context) == 1;
  X509_STORE* trusted = SSL_CTX_get_cert_store(context);
  for (const Certificate& authority : authorities) {
    configured = configured && X509_STORE_add_cert(trusted, authority.get()) == 1 &&
                 SSL_CTX_add_client_CA(context, authority.get()) == 1;
  }
  if (!configured) {
    char reason[256] = "unknown";
    if (const unsigned long error = ERR_get_error(); error != 0) {
      ERR_error_string_n(error, reason, sizeof(reason));
    }
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("TLS server: OpenSSL refused the credentials: ", reason));
  }
  SSL_CTX_set_options(context, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return absl::OkStatus();
}

}  // namespace loom
