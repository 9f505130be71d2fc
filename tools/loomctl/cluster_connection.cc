#include "tools/loomctl/cluster_connection.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cli/tls_flags.h"
#include "google/protobuf/util/json_util.h"
#include "tools/loomctl/cluster_state.h"

namespace loom::loomctl {

void AddClusterFlags(cli::ArgumentSpec& spec) {
  spec.AddFlag("coordinator", "HOST:PORT", "",
               absl::StrCat("the coordinator's loomd (default: the one 'loomctl cluster up' "
                            "recorded in ",
                            DefaultClusterStateDirectory(), ", else ", kDefaultCoordinator, ")"))
      .AddFlag("output", "text|json", "text",
               "text: tables for people; json: the API's messages as JSON, one object per line")
      .AddFlag("timeout", "DURATION", "60s",
               "the deadline of each call to the daemon (e.g. 500ms, 10s, 2m)");
  cli::AddTlsFlags(spec);
}

absl::StatusOr<ClusterCommandOptions> ClusterOptionsFrom(const char* command,
                                                         const cli::ParsedArguments& arguments,
                                                         const std::string& state_directory) {
  ClusterCommandOptions options;
  // The coordinator 'loomctl cluster up' recorded comes with its TLS files, used when no TLS flag
  // is given.
  std::optional<ClusterState> recorded;
  if (!arguments.Has("coordinator")) {
    absl::StatusOr<ClusterState> state = ReadClusterState(state_directory);
    if (state.ok() && !state->coordinator.empty()) recorded = *std::move(state);
  }
  const bool use_recorded = recorded.has_value();
  options.coordinator = arguments.Has("coordinator") ? arguments.Value("coordinator")
                        : use_recorded               ? recorded->coordinator
                                                     : std::string(kDefaultCoordinator);
  if (options.coordinator.find(':') == std::string::npos) {
    return cli::UsageError(
        command, absl::StrCat("--coordinator must be HOST:PORT, not '", options.coordinator, "'"));
  }
  const std::string output = arguments.Value("output");
  if (output == "json") {
    options.output = OutputFormat::kJson;
  } else if (output != "text") {
    return cli::UsageError(command,
                           absl::StrCat("--output must be text or json, not '", output, "'"));
  }
  const std::string timeout = arguments.Value("timeout");
  if (!absl::ParseDuration(timeout, &options.timeout) || options.timeout <= absl::ZeroDuration()) {
    return cli::UsageError(command,
                           absl::StrCat("--timeout must be a duration > 0 (e.g. 500ms, 10s, "
                                        "2m), not '",
                                        timeout, "'"));
  }
  const bool tls_flags =
      arguments.Has("tls-ca") || arguments.Has("tls-cert") || arguments.Has("tls-key");
  absl::StatusOr<std::optional<TlsCredentials>> tls =
      use_recorded && !tls_flags ? ReadTlsFiles(recorded->tls)
                                 : cli::TlsFromArguments(command, arguments);
  if (!tls.ok()) {
    if (use_recorded && !tls_flags) {
      return cli::UsageError(
          command, absl::StrCat("the TLS files of the cluster recorded in ",
                                ClusterStatePath(state_directory), ": ", tls.status().message()));
    }
    return tls.status();
  }
  options.tls = *std::move(tls);
  return options;
}

std::unique_ptr<ClusterClient> ConnectOrReport(const char* command,
                                               const ClusterCommandOptions& options,
                                               std::ostream& error) {
  ClusterClientOptions client_options;
  client_options.call_timeout = options.timeout;
  client_options.connect_timeout = std::min(options.timeout, absl::Seconds(5));
  client_options.tls = options.tls;
  absl::StatusOr<std::unique_ptr<ClusterClient>> client =
      ClusterClient::Connect(options.coordinator, client_options);
  if (!client.ok()) {
    error << command << ": " << client.status().message() << "\n";
    return nullptr;
  }
  return std::move(*client);
}

int ExitCodeOfRpcError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return cli::kExitUnreachable;
    default:
      return cli::kExitRequestRefused;
  }
}

int ReportRpcError(const char* command, const absl::Status& status, std::ostream& error) {
  error << command << ": " << absl::StatusCodeToString(status.code()) << ": " << status.message()
        << "\n";
  return ExitCodeOfRpcError(status);
}

std::string MessageToJsonLine(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.add_whitespace = false;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(message, &json, options).ok()) {
    // Only invalid UTF-8 in a string field fails; the daemon sends none.
    json = "{}";
  }
  return json + "\n";
}

}  // namespace loom::loomctl
