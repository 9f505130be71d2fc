#ifndef LOOM_CLI_TLS_FLAGS_H_
#define LOOM_CLI_TLS_FLAGS_H_

// The mutual TLS flags --tls-ca, --tls-cert and --tls-key (rpc/tls.h) on a command line:
// AddTlsFlags adds them to a subcommand's ArgumentSpec, for loomctl's cluster commands and loomd,
// and TlsFromArguments reads the credentials from the files they name.

#include <optional>

#include "absl/status/statusor.h"
#include "cli/arguments.h"
#include "rpc/tls.h"

namespace loom::cli {

// Adds --tls-ca, --tls-cert and --tls-key (mutual TLS, rpc/tls.h) to `spec`, for loomctl's
// cluster commands and for loomd.
void AddTlsFlags(ArgumentSpec& spec);
// ReadTlsFiles on the files they name: nullopt without them; its errors as usage errors.
absl::StatusOr<std::optional<TlsCredentials>> TlsFromArguments(const char* command,
                                                               const ParsedArguments& arguments);

}  // namespace loom::cli

#endif  // LOOM_CLI_TLS_FLAGS_H_
