#include "rpc/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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

std::unique_ptr<BIO, BioFree> MemoryOf(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every certificate in `pem`, in order.
std::vector<Certificate> ParseCertificates(const std::string& pem) {
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

}  // namespace

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
