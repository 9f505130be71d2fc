#ifndef LOOM_CLIENT_LOOMCTL_TLS_FLAGS_H_
#define LOOM_CLIENT_LOOMCTL_TLS_FLAGS_H_

#include <optional>

#include "absl/status/statusor.h"
#include "client/loomctl/arguments.h"
#include "client/tls.h"

namespace loom::loomctl {

// Adds --tls-ca, --tls-cert and --tls-key (mutual TLS, client/tls.h) to `spec`, for loomctl's
// cluster commands and for loomd.
void AddTlsFlags(ArgumentSpec& spec);
// ReadTlsFiles on the files they name: nullopt without them; its errors as usage errors.
absl::StatusOr<std::optional<TlsCredentials>> TlsFromArguments(const char* command,
                                                               const ParsedArguments& arguments);

}  // namespace loom::loomctl

#endif  // LOOM_CLIENT_LOOMCTL_TLS_FLAGS_H_
