#include "tools/loomctl/cluster_state.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/file_contents.h"
#include "core/json.h"
#include "core/json_string.h"

namespace loom::loomctl {
namespace {

using checkpoint::JsonValue;

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("the cluster state ", what));
}

absl::StatusOr<std::string> StringMember(const JsonValue& object, absl::string_view key) {
  const JsonValue* value = object.Find(key);
  if (value == nullptr || !value->is_string()) {
    return Malformed(absl::StrCat("has no string '", key, "'"));
  }
  return value->string_value();
}

absl::StatusOr<uint64_t> NumberMember(const JsonValue& object, absl::string_view key) {
  const JsonValue* value = object.Find(key);
  std::optional<uint64_t> number = value == nullptr ? std::nullopt : value->AsUint64();
  if (!number.has_value()) return Malformed(absl::StrCat("has no whole number '", key, "'"));
  return *number;
}

}  // namespace

std::string DefaultClusterStateDirectory() {
  // A location, not behaviour: where per-user runtime files belong.
  const char* runtime_directory = std::getenv("XDG_RUNTIME_DIR");
  if (runtime_directory != nullptr && runtime_directory[0] != '\0') {
    return (std::filesystem::path(runtime_directory) / "loom-cluster").string();
  }
  return absl::StrCat("/tmp/loom-cluster-", getuid());
}

std::string ClusterStatePath(const std::string& state_directory) {
  return (std::filesystem::path(state_directory) / "cluster.json").string();
}

std::string ClusterStateToJson(const ClusterState& state) {
  std::string json = absl::StrCat("{\n  \"coordinator\": ", JsonString(state.coordinator),
                                  ",\n  \"loomd\": ", JsonString(state.loomd), ",\n  \"nodes\": [");
  for (size_t i = 0; i < state.nodes.size(); ++i) {
    const ClusterNodeRecord& node = state.nodes[i];
    absl::StrAppend(
        &json, i == 0 ? "\n" : ",\n", "    {\"rank\": ", node.rank,
        ", \"name\": ", JsonString(node.name), ", \"pid\": ", node.pid,
        ", \"start_ticks\": ", node.start_ticks, ", \"address\": ", JsonString(node.address),
        ", \"log\": ", JsonString(node.log), ", \"metrics\": ", JsonString(node.metrics));
    if (!node.cpus.empty()) absl::StrAppend(&json, ", \"cpus\": ", JsonString(node.cpus));
    json += "}";
  }
  json += "\n  ]";
  if (!state.tls.authority_path.empty()) {
    absl::StrAppend(&json, ",\n  \"tls\": {\"ca\": ", JsonString(state.tls.authority_path),
                    ", \"cert\": ", JsonString(state.tls.certificate_path),
                    ", \"key\": ", JsonString(state.tls.private_key_path), "}");
  }
  json += "\n}\n";
  return json;
}

absl::StatusOr<ClusterState> ClusterStateFromJson(const std::string& json) {
  absl::StatusOr<JsonValue> root = checkpoint::ParseJson(json);
  if (!root.ok()) return Malformed(absl::StrCat("is not JSON: ", root.status().message()));
  if (!root->is_object()) return Malformed("is not a JSON object");
  ClusterState state;
  absl::StatusOr<std::string> coordinator = StringMember(*root, "coordinator");
  if (!coordinator.ok()) return coordinator.status();
  state.coordinator = *coordinator;
  absl::StatusOr<std::string> loomd = StringMember(*root, "loomd");
  if (!loomd.ok()) return loomd.status();
  state.loomd = *loomd;
  const JsonValue* nodes = root->Find("nodes");
  if (nodes == nullptr || !nodes->is_array()) return Malformed("has no array 'nodes'");
  for (const JsonValue& node : nodes->elements()) {
    if (!node.is_object()) return Malformed("has a node that is not an object");
    ClusterNodeRecord record;
    absl::StatusOr<uint64_t> rank = NumberMember(node, "rank");
    absl::StatusOr<uint64_t> pid = NumberMember(node, "pid");
    absl::StatusOr<uint64_t> start_ticks = NumberMember(node, "start_ticks");
    absl::StatusOr<std::string> name = StringMember(node, "name");
    absl::StatusOr<std::string> address = StringMember(node, "address");
    absl::StatusOr<std::string> log = StringMember(node, "log");
    absl::StatusOr<std::string> metrics = StringMember(node, "metrics");
    for (const absl::Status& status :
         {rank.status(), pid.status(), start_ticks.status(), name.status(), address.status(),
          log.status(), metrics.status()}) {
      if (!status.ok()) return status;
    }
    record.rank = static_cast<int>(*rank);
    record.pid = static_cast<int64_t>(*pid);
    record.start_ticks = *start_ticks;
    record.name = *name;
    record.address = *address;
    record.log = *log;
    record.metrics = *metrics;
    if (node.Find("cpus") != nullptr) {
      absl::StatusOr<std::string> cpus = StringMember(node, "cpus");
      if (!cpus.ok()) return cpus.status();
      record.cpus = *cpus;
    }
    state.nodes.push_back(std::move(record));
  }
  if (const JsonValue* tls = root->Find("tls"); tls != nullptr) {
    if (!tls->is_object()) return Malformed("has a 'tls' that is not an object");
    absl::StatusOr<std::string> authority = StringMember(*tls, "ca");
    absl::StatusOr<std::string> certificate = StringMember(*tls, "cert");
    absl::StatusOr<std::string> key = StringMember(*tls, "key");
    for (const absl::Status& status : {authority.status(), certificate.status(), key.status()}) {
      if (!status.ok()) return status;
    }
    state.tls = {*authority, *certificate, *key};
  }
  return state;
}

absl::StatusOr<ClusterState> ReadClusterState(const std::string& state_directory) {
  const std::string path = ClusterStatePath(state_directory);
  absl::StatusOr<std::string> text = ReadFileContents(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("no cluster is recorded in ", path));
  absl::StatusOr<ClusterState> state = ClusterStateFromJson(*text);
  if (!state.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", state.status().message()));
  }
  return state;
}

absl::Status WriteClusterState(const std::string& state_directory, const ClusterState& state) {
  const std::string path = ClusterStatePath(state_directory);
  const std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary, std::ios::trunc);
    file << ClusterStateToJson(state);
    file.close();
    if (!file) return absl::InternalError(absl::StrCat("cannot write ", temporary));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", temporary, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace loom::loomctl
