#include "daemon/cluster.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/device_name.h"
#include "glog/logging.h"
#include "google/protobuf/descriptor.h"
#include "runtime/actor_id.h"

namespace loom::daemon {
namespace {

// What a registration may hold.
constexpr size_t kMaxNameBytes = 253;  // a DNS name's
constexpr size_t kMaxAddressBytes = 1024;
// The smallest --max-message-size loomd takes.
constexpr int64_t kMinMessageBytes = 1024;
// What a CoordinatorMessage adds to the command it carries (its field's tag and length).
constexpr int64_t kCommandEnvelopeBytes = 16;

// A certificate identity as messages quote it.
std::string IdentityText(const std::optional<std::string>& identity) {
  if (!identity.has_value()) return "no certificate (plaintext)";
  return absl::StrCat("certificate '", identity->substr(0, 64), "'");
}

}  // namespace

Cluster::Cluster(Options options, v1::NodeInfo self, Sender self_sender) : options_(options) {
  Node& node = nodes_[0];
  node.info = std::move(self);
  node.info.set_index(0);
  node.info.set_coordinator(true);
  node.info.set_state(v1::NODE_STATE_READY);
  node.sender = std::move(self_sender);
  node.last_heard = absl::InfiniteFuture();
  node.max_message_bytes = options_.max_message_bytes;
}

Cluster::~Cluster() { Stop(); }

void Cluster::Start() {
  monitor_ = std::thread([this] { MonitorLoop(); });
}

void Cluster::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (monitor_.joinable()) monitor_.join();
}

absl::Status ValidateRegistration(const v1::RegisterNode& node) {
  if (node.name().empty()) {
    return absl::InvalidArgumentError("a node registered without a name (--node-name)");
  }
  if (node.name().size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a node registered with a name of ",
                                                   node.name().size(), " bytes (at most ",
                                                   kMaxNameBytes, ")"));
  }
  const std::string who = absl::StrCat("node '", node.name(), "'");
  if (node.rank() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, " asked for rank 0, which is the coordinator's"));
  }
  if (node.rank() < -1 || node.rank() > ActorId::kMaxNode) {
    return absl::InvalidArgumentError(absl::StrCat(who, " asked for rank ", node.rank(),
                                                   ": a rank is -1 (any) or from 1 to ",
                                                   ActorId::kMaxNode));
  }
  if (node.address().size() > kMaxAddressBytes || node.version().size() > kMaxAddressBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, " registered an address or version over ", kMaxAddressBytes, " bytes"));
  }
  if (node.devices_size() > kMaxRegisteredDevices) {
    return absl::InvalidArgumentError(absl::StrCat(who, " registered ", node.devices_size(),
                                                   " devices (at most ", kMaxRegisteredDevices,
                                                   ")"));
  }
  if (node.host_memory_budget_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, " registered a negative host memory budget"));
  }
  if (node.max_message_bytes() != 0 && node.max_message_bytes() < kMinMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(who, " registered a message limit of ",
                                                   node.max_message_bytes(), " bytes (at least ",
                                                   kMinMessageBytes, ", or 0: not said)"));
  }
  absl::flat_hash_set<std::pair<std::string, int>> seen;
  for (const v1::DeviceInfo& device : node.devices()) {
    if (device.type() != "cpu" && device.type() != "cuda") {
      return absl::InvalidArgumentError(absl::StrCat(
          who, " registered a device of type '", device.type().substr(0, 64), "' (cpu or cuda)"));
    }
    if (device.index() < 0 || device.index() > ActorId::kMaxDeviceIndex) {
      return absl::InvalidArgumentError(absl::StrCat(who, " registered device ", device.type(), ":",
                                                     device.index(), " (indices go from 0 to ",
                                                     ActorId::kMaxDeviceIndex, ")"));
    }
    if (device.memory_budget_bytes() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(who, " registered device ", device.type(), ":",
                                                     device.index(),
                                                     " with a negative memory budget"));
    }
    if (!seen.emplace(device.type(), device.index()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, " registered device ", device.type(), ":", device.index(), " twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status Cluster::CheckTakeOverLocked(int index, const Node& node, const std::string& name,
                                          const std::optional<std::string>& identity) const {
  if (node.identity == identity) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "node '", name, "' (", IdentityText(identity), ") may not take over node ", index, " ('",
      node.info.name(), "', missing), which registered with ", IdentityText(node.identity),
      ": only that node's certificate may (or wait --missing-node-expiry, ",
      absl::FormatDuration(options_.missing_node_expiry), ", until it is forgotten)"));
}

void Cluster::ForgetExpiredLocked(absl::Time now) {
  for (auto node = nodes_.begin(); node != nodes_.end();) {
    if (node->first == 0 || node->second.info.state() != v1::NODE_STATE_MISSING ||
        now - node->second.missing_since < options_.missing_node_expiry) {
      ++node;
      continue;
    }
    LOG(INFO) << "node " << node->first << " ('" << node->second.info.name()
              << "') forgotten: missing for "
              << absl::FormatDuration(now - node->second.missing_since)
              << " (--missing-node-expiry " << absl::FormatDuration(options_.missing_node_expiry)
              << ")";
    node = nodes_.erase(node);
  }
}

absl::StatusOr<Cluster::Registration> Cluster::Register(const v1::RegisterNode& node, Sender sender,
                                                        SessionCanceller cancel_session,
                                                        std::optional<std::string> identity) {
  if (absl::Status valid = ValidateRegistration(node); !valid.ok()) return valid;
  std::lock_guard<std::mutex> lock(mutex_);
  ForgetExpiredLocked(absl::Now());
  int index = -1;
  for (auto& [existing_index, existing] : nodes_) {
    if (existing.info.name() != node.name()) continue;
    if (existing_index == 0 || existing.info.state() != v1::NODE_STATE_MISSING) {
      return absl::AlreadyExistsError(absl::StrCat(
          "a node named '", node.name(), "' is already connected as node ", existing_index));
    }
    if (absl::Status allowed = CheckTakeOverLocked(existing_index, existing, node.name(), identity);
        !allowed.ok()) {
      return allowed;
    }
    index = existing_index;
  }
  if (index < 0 && node.rank() > 0) {
    auto taken = nodes_.find(node.rank());
    if (taken != nodes_.end()) {
      // With TLS, a MISSING node's own certificate may take its index back under another name.
      const bool same_certificate = identity.has_value() && taken->second.identity == identity;
      if (taken->second.info.state() == v1::NODE_STATE_MISSING && identity.has_value() &&
          !same_certificate) {
        return CheckTakeOverLocked(node.rank(), taken->second, node.name(), identity);
      }
      if (taken->second.info.state() != v1::NODE_STATE_MISSING || !same_certificate) {
        return absl::InvalidArgumentError(absl::StrCat("node '", node.name(), "' asked for rank ",
                                                       node.rank(), ", which node '",
                                                       taken->second.info.name(), "' holds"));
      }
    }
    index = node.rank();
  }
  if (index < 0) {
    index = 1;
    while (nodes_.contains(index)) ++index;
    if (index > ActorId::kMaxNode) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "node '", node.name(), "' cannot join: the cluster has ", ActorId::kMaxNode, " workers"));
    }
  }
  if (!nodes_.contains(index)) {
    const int workers = static_cast<int>(nodes_.size()) - 1;  // node 0 is the coordinator
    if (workers >= options_.max_nodes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "node '", node.name(), "' cannot join: the coordinator knows ", workers,
          " workers (ready or missing), as many as --max-nodes allows; a missing one is "
          "forgotten after --missing-node-expiry (",
          absl::FormatDuration(options_.missing_node_expiry), ")"));
    }
  }
  Node& entry = nodes_[index];
  entry.identity = std::move(identity);
  entry.info.set_name(node.name());
  entry.info.set_index(index);
  entry.info.set_address(node.address());
  entry.info.set_state(v1::NODE_STATE_READY);
  entry.info.set_coordinator(false);
  entry.info.set_version(node.version());
  entry.info.set_host_memory_budget_bytes(node.host_memory_budget_bytes());
  entry.info.clear_devices();
  for (const v1::DeviceInfo& device : node.devices()) {
    v1::DeviceInfo* added = entry.info.add_devices();
    *added = device;
    added->set_name(DeviceName(index, device.type(), device.index()));
  }
  entry.info.clear_running_job_id();
  entry.sender = std::move(sender);
  entry.cancel_session = std::move(cancel_session);
  entry.generation = next_generation_++;
  entry.last_heard = absl::Now();
  entry.max_message_bytes =
      node.max_message_bytes() > 0 ? node.max_message_bytes() : options_.max_message_bytes;
  LOG(INFO) << "node " << index << " ('" << node.name() << "' at " << node.address()
            << ") joined with " << node.devices_size() << " devices";
  return Registration{index, entry.generation};
}

int64_t Cluster::AddUnregisteredSession(SessionCanceller cancel) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t id = next_unregistered_++;
  unregistered_[id] = UnregisteredSession{absl::Now(), std::move(cancel)};
  return id;
}

void Cluster::RemoveUnregisteredSession(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  unregistered_.erase(id);
}

void Cluster::Heartbeat(int index, int64_t generation, const v1::Heartbeat* beat) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto node = nodes_.find(index);
  if (node != nodes_.end() && node->second.generation == generation) {
    node->second.last_heard = absl::Now();
    if (beat != nullptr) SetHealthLocked(node->second, beat->unhealthy());
  }
}

void Cluster::SetNodeHealth(int index, const absl::Status& health) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto node = nodes_.find(index);
  if (node != nodes_.end()) {
    SetHealthLocked(node->second, health.ok() ? std::string() : std::string(health.message()));
  }
}

void Cluster::SetHealthLocked(Node& node, const std::string& unhealthy) {
  const v1::NodeState state = node.info.state();
  if (!unhealthy.empty() && (state == v1::NODE_STATE_READY || state == v1::NODE_STATE_UNHEALTHY)) {
    if (state == v1::NODE_STATE_READY) {
      LOG(WARNING) << "node " << node.info.index() << " ('" << node.info.name()
                   << "') reports itself unhealthy: " << unhealthy;
    }
    node.info.set_state(v1::NODE_STATE_UNHEALTHY);
    node.info.set_unhealthy(unhealthy);
  } else if (unhealthy.empty() && state == v1::NODE_STATE_UNHEALTHY) {
    LOG(WARNING) << "node " << node.info.index() << " ('" << node.info.name()
                 << "') is healthy again";
    node.info.set_state(v1::NODE_STATE_READY);
    node.info.clear_unhealthy();
  }
}

bool Cluster::MarkMissingLocked(Node& node) {
  if (node.info.state() == v1::NODE_STATE_MISSING) return false;
  node.info.set_state(v1::NODE_STATE_MISSING);
  node.missing_since = absl::Now();
  node.sender = nullptr;
  node.cancel_session = nullptr;
  return true;
}

void Cluster::Disconnected(int index, int64_t generation, const absl::Status& reason) {
  bool lost = false;
  bool stopping = false;
  std::string name;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto node = nodes_.find(index);
    if (node == nodes_.end() || node->second.generation != generation) return;
    lost = MarkMissingLocked(node->second);
    name = node->second.info.name();
    stopping = stopping_;
  }
  if (!lost) return;
  absl::Status status = absl::UnavailableError(absl::StrCat(
      "node ", index, " ('", name, "') was lost: its session ended (", reason.message(), ")"));
  if (stopping) {
    // This daemon's own shutdown ends the sessions: no news.
    LOG(INFO) << status.message() << " as this daemon stops";
  } else {
    LOG(WARNING) << status.message();
  }
  if (lost_handler_) lost_handler_(index, status);
}

void Cluster::MonitorLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    changed_.wait_for(lock, absl::ToChronoNanoseconds(options_.heartbeat_interval / 2));
    if (stopping_) break;
    const absl::Time now = absl::Now();
    ForgetExpiredLocked(now);
    struct Lost {
      int index;
      absl::Status status;
      SessionCanceller cancel_session;
    };
    std::vector<Lost> lost;
    for (auto& [index, node] : nodes_) {
      if (node.info.state() != v1::NODE_STATE_READY || index == 0) continue;
      if (now - node.last_heard <= options_.node_timeout) continue;
      lost.push_back(
          Lost{index,
               absl::UnavailableError(absl::StrCat(
                   "node ", index, " ('", node.info.name(), "') was lost: no heartbeat for ",
                   absl::FormatDuration(now - node.last_heard), " (timeout ",
                   absl::FormatDuration(options_.node_timeout), ")")),
               node.cancel_session});
      MarkMissingLocked(node);
    }
    std::vector<SessionCanceller> silent;
    for (auto session = unregistered_.begin(); session != unregistered_.end();) {
      if (now - session->second.opened <= options_.node_timeout) {
        ++session;
        continue;
      }
      silent.push_back(std::move(session->second.cancel));
      session = unregistered_.erase(session);
    }
    if (lost.empty() && silent.empty()) continue;
    lock.unlock();
    for (const SessionCanceller& cancel : silent) cancel();
    for (const Lost& node : lost) {
      LOG(WARNING) << node.status.message();
      if (lost_handler_) lost_handler_(node.index, node.status);
      // After the handler, so that the job's error is the loss: a command the job's thread is
      // writing to the silent worker (waiting for it to read) now fails and frees that thread.
      if (node.cancel_session) node.cancel_session();
    }
    lock.lock();
  }
}

absl::Status Cluster::Send(int index, const v1::NodeCommand& command) {
  // The command's kind by its oneof field's name: "launch", "connect", ...
  const google::protobuf::FieldDescriptor* kind =
      v1::NodeCommand::descriptor()->FindFieldByNumber(command.kind_case());
  if (absl::Status fits = CheckMessageFits(
          index, static_cast<int64_t>(command.ByteSizeLong()) + kCommandEnvelopeBytes,
          absl::StrCat("the ", kind != nullptr ? kind->name() : "command", " of job ",
                       command.job_id()));
      !fits.ok()) {
    return fits;
  }
  Sender sender;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto node = nodes_.find(index);
    if (node != nodes_.end()) sender = node->second.sender;
  }
  if (!sender || !sender(command)) {
    return absl::UnavailableError(absl::StrCat(Describe(index), " is not connected"));
  }
  return absl::OkStatus();
}

int64_t Cluster::MessageLimitLocked(int index) const {
  auto node = nodes_.find(index);
  if (node == nodes_.end()) return options_.max_message_bytes;
  return std::min(options_.max_message_bytes, node->second.max_message_bytes);
}

int64_t Cluster::MessageLimit(int index) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return MessageLimitLocked(index);
}

absl::Status Cluster::CheckMessageFits(int index, int64_t bytes, absl::string_view what) const {
  if (index == 0) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t limit = MessageLimitLocked(index);
  if (bytes <= limit) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " takes ", bytes, " bytes, over the ", limit,
                   " bytes a message between the coordinator and ", DescribeLocked(index),
                   " may carry (the smaller of the two daemons' --max-message-size)"));
}

std::vector<v1::NodeInfo> Cluster::Nodes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<v1::NodeInfo> nodes;
  for (const auto& [index, node] : nodes_) nodes.push_back(node.info);
  return nodes;
}

compiler::DeviceSet Cluster::Devices() const {
  std::lock_guard<std::mutex> lock(mutex_);
  compiler::DeviceSet devices;
  for (const auto& [index, node] : nodes_) {
    if (static_cast<size_t>(index) >= devices.host_memory_budget_bytes.size()) {
      devices.host_memory_budget_bytes.resize(index + 1, 0);
    }
    devices.host_memory_budget_bytes[index] = node.info.host_memory_budget_bytes();
    for (const v1::DeviceInfo& info : node.info.devices()) {
      plan::Device device;
      device.set_node(index);
      device.set_type(info.type() == "cuda" ? plan::CUDA : plan::CPU);
      device.set_index(info.index());
      devices.devices.push_back(device);
      devices.memory_budget_bytes.push_back(info.memory_budget_bytes());
    }
  }
  return devices;
}

absl::Status Cluster::CheckReady(const std::vector<int>& indices) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string missing;
  for (int index : indices) {
    auto node = nodes_.find(index);
    if (node != nodes_.end() && node->second.info.state() == v1::NODE_STATE_READY) continue;
    std::string why = "never joined";
    if (node != nodes_.end()) {
      const v1::NodeInfo& info = node->second.info;
      why = absl::StrCat("'", info.name(), "', ",
                         info.state() == v1::NODE_STATE_UNHEALTHY
                             ? absl::StrCat("unhealthy: ", info.unhealthy())
                             : absl::AsciiStrToLower(absl::StripPrefix(
                                   v1::NodeState_Name(info.state()), "NODE_STATE_")));
    }
    absl::StrAppend(&missing, missing.empty() ? "" : ", ", "node ", index, " (", why, ")");
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the job needs nodes that are not ready: ", missing));
}

std::string Cluster::Describe(int index) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return DescribeLocked(index);
}

std::string Cluster::DescribeLocked(int index) const {
  auto node = nodes_.find(index);
  if (node == nodes_.end()) return absl::StrCat("node ", index);
  return absl::StrCat("node ", index, " ('", node->second.info.name(), "')");
}

std::string Cluster::DescribeWithAddress(int index) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto node = nodes_.find(index);
  if (node == nodes_.end()) return absl::StrCat("node ", index);
  return absl::StrCat("node ", index, " ('", node->second.info.name(), "' at ",
                      node->second.info.address(), ")");
}

void Cluster::SetRunningJob(const std::string& job_id, const std::vector<int>& indices) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [index, node] : nodes_) node.info.clear_running_job_id();
  for (int index : indices) {
    auto node = nodes_.find(index);
    if (node != nodes_.end()) node->second.info.set_running_job_id(job_id);
  }
}

void Cluster::SetSelfAddress(const std::string& address) {
  std::lock_guard<std::mutex> lock(mutex_);
  nodes_[0].info.set_address(address);
}

void Cluster::SetDraining() {
  std::lock_guard<std::mutex> lock(mutex_);
  nodes_[0].info.set_state(v1::NODE_STATE_DRAINING);
}

}  // namespace loom::daemon
