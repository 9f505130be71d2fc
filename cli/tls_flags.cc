#include "cli/tls_flags.h"

namespace loom::cli {

void AddTlsFlags(ArgumentSpec& spec) {
  spec.AddFlag("tls-ca", "FILE", "",
               "mutual TLS: the PEM certificate of the authority that signs every loomd's and "
               "client's certificate (with --tls-cert and --tls-key; none of the three: plaintext)")
      .AddFlag("tls-cert", "FILE", "",
               "mutual TLS: this party's PEM certificate (chain), signed by --tls-ca; a daemon's "
               "must name the host or IP address it is reached at")
      .AddFlag("tls-key", "FILE", "", "mutual TLS: the PEM private key of --tls-cert");
}

absl::StatusOr<std::optional<TlsCredentials>> TlsFromArguments(const char* command,
                                                               const ParsedArguments& arguments) {
  absl::StatusOr<std::optional<TlsCredentials>> tls = ReadTlsFiles(
      {arguments.Value("tls-ca"), arguments.Value("tls-cert"), arguments.Value("tls-key")});
  if (!tls.ok()) return UsageError(command, std::string(tls.status().message()));
  return tls;
}

}  // namespace loom::cli
