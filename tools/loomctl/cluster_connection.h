#ifndef LOOM_TOOLS_LOOMCTL_CLUSTER_CONNECTION_H_
#define LOOM_TOOLS_LOOMCTL_CLUSTER_CONNECTION_H_

// What every loomctl command that talks to a cluster shares: ClusterCommandOptions and their flags
// (--coordinator and its default, --output, --timeout, TLS), connecting to the coordinator, a
// failed call's message and exit code (ReportRpcError, ExitCodeOfRpcError), and messages as JSON
// lines.

#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cli/arguments.h"
#include "client/cluster_client.h"
#include "rpc/tls.h"
#include "tools/loomctl/cluster_state.h"
#include "tools/loomctl/job_summary.h"

namespace loom::loomctl {

// What every command that talks to a cluster shares: where the coordinator is, the output format
// and the deadline of each call.
struct ClusterCommandOptions {
  std::string coordinator;
  OutputFormat output = OutputFormat::kText;
  absl::Duration timeout = absl::Seconds(60);
  // --tls-ca / --tls-cert / --tls-key; nullopt: plaintext.
  std::optional<TlsCredentials> tls;
};

// The address used when --coordinator is not given and no local cluster is recorded.
inline constexpr char kDefaultCoordinator[] = "127.0.0.1:7070";

// Adds --coordinator, --output, --timeout and the TLS flags (tls_flags.h) to `spec`.
void AddClusterFlags(cli::ArgumentSpec& spec);
// Reads them. The coordinator defaults to the one `loomctl cluster up` recorded in
// `state_directory`, with the cluster's TLS files unless TLS flags are given, else
// kDefaultCoordinator. INVALID_ARGUMENT naming the flag (or the state file) on a bad value.
absl::StatusOr<ClusterCommandOptions> ClusterOptionsFrom(
    const char* command, const cli::ParsedArguments& arguments,
    const std::string& state_directory = DefaultClusterStateDirectory());

// Connects to options.coordinator. On failure writes "COMMAND: MESSAGE" to `error`.
std::unique_ptr<ClusterClient> ConnectOrReport(const char* command,
                                               const ClusterCommandOptions& options,
                                               std::ostream& error);

// Writes "COMMAND: CODE: MESSAGE" to `error` and returns the exit code of a failed call:
// kExitUnreachable for UNAVAILABLE and DEADLINE_EXCEEDED, else kExitRequestRefused.
int ReportRpcError(const char* command, const absl::Status& status, std::ostream& error);
int ExitCodeOfRpcError(const absl::Status& status);

// A protobuf message as one line of JSON (proto3 JSON mapping with the .proto's field names;
// every field, also the ones at their default; enums by name), ending with a newline.
std::string MessageToJsonLine(const google::protobuf::Message& message);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_CLUSTER_CONNECTION_H_
