#include "client/tls.h"

#include <fstream>
#include <sstream>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace {

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

}  // namespace loom
