#ifndef LOOM_DAEMON_CLUSTER_H_
#define LOOM_DAEMON_CLUSTER_H_

// The coordinator's registry of its nodes: Cluster keeps node 0 (itself) and every worker that
// registered through a NodeService session, with their indices, heartbeats and message limits,
// marks a node whose session ended or went silent MISSING and tells the lost-node handler, forgets
// it after the missing-node expiry, caps the nodes it knows, and sends the nodes their commands.
// Also ValidateRegistration, the checks a RegisterNode must pass.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "compiler/logical_graph.h"
#include "proto/loom/v1/cluster_service.pb.h"
#include "proto/loom/v1/node_service.pb.h"

namespace loom::daemon {

// OK for a registration a cluster may take: a name (at most 253 bytes), a rank of -1 (any) or from
// 1 to ActorId::kMaxNode, at most kMaxRegisteredDevices cpu and cuda devices with indices an actor
// id holds, each once, and non-negative budgets. INVALID_ARGUMENT naming the field otherwise.
inline constexpr int kMaxRegisteredDevices = 1024;
absl::Status ValidateRegistration(const v1::RegisterNode& node);

// The coordinator's view of its nodes (DESIGN.md §1): itself as node 0, and every worker that
// registered through a NodeService session. A node keeps its index while it is known: a worker
// asks for one with --node-rank, or gets the next free one; one that reconnects under the same name
// gets its old index back. A node whose session ends, or that sends no heartbeat for the node
// timeout, is MISSING: the lost-node handler is told (the running job fails), and jobs that need
// it are refused until it is back. A node MISSING for Options::missing_node_expiry is forgotten
// (its index freed). At most Options::max_nodes workers are known at once (READY or MISSING).
//
// Who may take a known node's name or index: with mutual TLS, only a registration that presents
// the certificate identity the node registered with (and only while the node is MISSING); without
// TLS, a registration of the same name takes back a MISSING node's index (a restarted worker gets
// its rank back), and nothing takes another node's index.
//
// Thread-safe.
class Cluster {
 public:
  // Delivers a command to a node; false when it cannot (the session is gone).
  using Sender = std::function<bool(const v1::NodeCommand& command)>;
  // Ends a session (its call): for a registered worker lost for want of heartbeats, so that a
  // Sender waiting for it to read returns; for a session that never registered, so that it holds
  // no thread beyond the node timeout.
  using SessionCanceller = std::function<void()>;
  using LostHandler = std::function<void(int index, const absl::Status& reason)>;

  struct Options {
    absl::Duration heartbeat_interval = absl::Seconds(1);
    absl::Duration node_timeout = absl::Seconds(5);
    // The coordinator's --max-message-size: the largest message its server sends or receives.
    int64_t max_message_bytes = int64_t{64} << 20;
    // loomd --max-nodes: the most workers known at once, READY or MISSING (the coordinator itself
    // does not count); a registration beyond them is RESOURCE_EXHAUSTED.
    int max_nodes = 256;
    // loomd --missing-node-expiry: a worker MISSING this long is forgotten (its index freed).
    absl::Duration missing_node_expiry = absl::Minutes(10);
  };

  // `self` describes the coordinator's own node (index 0), reached through `self_sender`.
  Cluster(Options options, v1::NodeInfo self, Sender self_sender);
  ~Cluster();

  // Before Start: who to tell when a node is lost.
  void set_lost_handler(LostHandler handler) { lost_handler_ = std::move(handler); }
  // Starts the heartbeat monitor.
  void Start();
  void Stop();

  // A worker's session registered: its index, and the session's generation (for Heartbeat and
  // Disconnected). `identity` is the subject CN of the session's node certificate (nullopt over
  // plaintext). INVALID_ARGUMENT for a bad registration (ValidateRegistration, or a rank another
  // node holds), ALREADY_EXISTS when a node of that name is connected (or is the coordinator),
  // PERMISSION_DENIED when a MISSING node of that name or rank registered with another certificate
  // identity, RESOURCE_EXHAUSTED when Options::max_nodes are known or no index is left.
  // `cancel_session` (may be null) must stay callable until Disconnected.
  struct Registration {
    int index;
    int64_t generation;
  };
  absl::StatusOr<Registration> Register(const v1::RegisterNode& node, Sender sender,
                                        SessionCanceller cancel_session = nullptr,
                                        std::optional<std::string> identity = std::nullopt);
  // With `beat`: a READY node that reports itself unhealthy (Heartbeat.unhealthy, its part of a
  // job did not end within --release-timeout) is UNHEALTHY until it reports itself healthy again.
  void Heartbeat(int index, int64_t generation, const v1::Heartbeat* beat = nullptr);
  // The same for a node whose health is known in the process (the coordinator's own, node 0).
  void SetNodeHealth(int index, const absl::Status& health);
  // A session that has not registered yet: `cancel` is called once it has been open for the node
  // timeout, unless RemoveUnregisteredSession(returned id) came first (the monitor may still be
  // calling it as that returns, so `cancel` must outlive the session).
  int64_t AddUnregisteredSession(SessionCanceller cancel);
  void RemoveUnregisteredSession(int64_t id);
  // The session ended (`reason` says how).
  void Disconnected(int index, int64_t generation, const absl::Status& reason);

  // Sends a command: UNAVAILABLE when the node is not connected, RESOURCE_EXHAUSTED (and nothing
  // sent) when the command is over the node's MessageLimit, which would end its session.
  absl::Status Send(int index, const v1::NodeCommand& command);

  // The largest message between the coordinator and node `index`: the smaller of the two daemons'
  // --max-message-size (the coordinator's own for itself and for unknown nodes).
  int64_t MessageLimit(int index) const;
  // OK when a message of `bytes` fits MessageLimit(index), or `index` is the coordinator's own
  // node (which gets its commands in the process); RESOURCE_EXHAUSTED saying that `what` (e.g.
  // "the launch of job job-3") takes too many bytes otherwise.
  absl::Status CheckMessageFits(int index, int64_t bytes, absl::string_view what) const;

  // Every known node, by index.
  std::vector<v1::NodeInfo> Nodes() const;
  // The devices of every known node (ready or missing): what jobs may be placed on.
  compiler::DeviceSet Devices() const;
  // OK when these nodes are all ready; FAILED_PRECONDITION naming the missing ones.
  absl::Status CheckReady(const std::vector<int>& indices) const;
  // "node 2 ('worker-b')".
  std::string Describe(int index) const;
  // "node 2 ('worker-b' at 10.0.0.3:7070)": with the address it registered.
  std::string DescribeWithAddress(int index) const;
  void SetSelfAddress(const std::string& address);
  // Shows `job_id` as running on these nodes (and nothing on the others).
  void SetRunningJob(const std::string& job_id, const std::vector<int>& indices);
  void SetDraining();
  const Options& options() const { return options_; }

 private:
  struct Node {
    v1::NodeInfo info;
    Sender sender;
    SessionCanceller cancel_session;
    int64_t generation = 0;
    absl::Time last_heard;
    // Its --max-message-size (the coordinator's for itself and for workers that did not say).
    int64_t max_message_bytes = 0;
    // The subject CN of the certificate it registered with; nullopt over plaintext.
    std::optional<std::string> identity;
    // When it became MISSING.
    absl::Time missing_since;
  };

  void MonitorLoop();
  // Under mutex_: READY <-> UNHEALTHY as `unhealthy` (empty: healthy) says; other states stay.
  static void SetHealthLocked(Node& node, const std::string& unhealthy);
  // Under mutex_: marks the node missing; returns whether it was ready.
  bool MarkMissingLocked(Node& node);
  // Under mutex_: forgets the workers MISSING for the expiry at `now`.
  void ForgetExpiredLocked(absl::Time now);
  // Under mutex_: OK when a registration of `name` with `identity` may take `index`, which `node`
  // holds (MISSING): PERMISSION_DENIED naming both otherwise.
  absl::Status CheckTakeOverLocked(int index, const Node& node, const std::string& name,
                                   const std::optional<std::string>& identity) const;
  int64_t MessageLimitLocked(int index) const;
  std::string DescribeLocked(int index) const;

  const Options options_;
  LostHandler lost_handler_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<int, Node> nodes_;  // guarded by mutex_
  struct UnregisteredSession {
    absl::Time opened;
    SessionCanceller cancel;
  };
  std::map<int64_t, UnregisteredSession> unregistered_;  // guarded by mutex_, by id
  int64_t next_unregistered_ = 1;                        // guarded by mutex_
  int64_t next_generation_ = 1;
  bool stopping_ = false;
  std::thread monitor_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_CLUSTER_H_
