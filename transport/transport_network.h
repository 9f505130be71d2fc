#ifndef LOOM_TRANSPORT_TRANSPORT_NETWORK_H_
#define LOOM_TRANSPORT_TRANSPORT_NETWORK_H_

// TransportNetwork: the runtime's Network over a Transport (UCX), one per node per job: actor
// messages as fixed-size active messages, register and collective data as tag messages, and the
// probes that check that every peer is reachable before a job starts. loomd's node jobs use it.

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "runtime/message.h"
#include "runtime/network.h"
#include "transport/transport.h"

namespace loom::transport {

// The runtime's Network over UCX: one Transport per node per job. Actor messages travel as
// fixed-size active messages (an ActorMessage in a 40-byte little-endian record), register and
// collective data as tag messages.
//
//   auto network = TransportNetwork::Create(node, context_options);
//   publish (*network)->address() through the coordinator; for every other node:
//   (*network)->Connect(peer, peer_address);
//   (*network)->SetHandlers(deliver_to_job_runtime, fail_the_job);   // before any peer sends
//   (*network)->SendProbe(peer) for every other node; then
//   (*network)->WaitForProbes(peers, timeout);   // every peer reachable, both ways
//
// The node is also its own peer (collectives between ranks of one node use the same path).
class TransportNetwork final : public Network {
 public:
  // Called on the thread driving the transport (its progress thread, or a collective rank waiting
  // in DriveUntil) for every actor message received (must not block).
  using MessageReceiver = std::function<void(const ActorMessage& message)>;
  // Called on the thread driving the transport when a peer is lost or sends something malformed
  // (an actor message of the wrong length or type, or claiming another sender node or another
  // destination node; a malformed same-host copy message: DATA_LOSS); the status names the peer.
  using ErrorHandler = std::function<void(const absl::Status& status)>;

  // How long Stop() waits at most for the probes of peers this node probed and has not heard from.
  static constexpr absl::Duration kDefaultStopGrace = absl::Seconds(1);

  static absl::StatusOr<std::unique_ptr<TransportNetwork>> Create(
      int node, UcxContextOptions context = {}, absl::Duration stop_grace = kDefaultStopGrace);
  ~TransportNetwork() override;

  // The bytes other nodes pass to Connect.
  const std::string& address() const { return transport_->address(); }
  absl::Status Connect(int peer, absl::string_view address);
  // Until set, received messages are dropped with an error to the log; set before the job starts.
  void SetHandlers(MessageReceiver receiver, ErrorHandler on_error);
  // The job on this node has ended: a peer lost from now on (the peers are released one by one)
  // is no error of the job's; messages are still delivered.
  void JobEnded();

  // Reachability, checked before a job starts: every node sends a probe to each of its peers once
  // connected to it, then waits for a probe from each. A probe from a peer shows that the peer
  // connected to this node and that its messages arrive here; the peer's own wait checks the other
  // direction. Probes that arrive before WaitForProbes are remembered.
  absl::Status SendProbe(int peer);
  // Waits until a probe arrived from every one of `peers`, the connection to it failed, or
  // `timeout` passed. Returns the peers not heard from, each with why: the connection's error
  // (UCX's reason), or DEADLINE_EXCEEDED. Empty: every peer was heard from. After
  // InterruptProbeWait, returns its reason at once instead.
  absl::StatusOr<std::map<int, absl::Status>> WaitForProbes(const std::vector<int>& peers,
                                                            absl::Duration timeout);
  // Ends the WaitForProbes in progress, and every later one, with `reason` (the job was aborted
  // while it connected). The first reason is kept.
  void InterruptProbeWait(absl::Status reason);

  // Network.
  int node() const override { return node_; }
  absl::string_view transport() const override { return "ucx"; }
  absl::Status SendMessage(const ActorMessage& message) override;
  absl::Status SendData(int destination, Tag tag, const void* buffer, size_t size,
                        Completion done) override;
  absl::Status ReceiveData(Tag tag, void* buffer, size_t size, Completion done) override;
  bool DriveUntil(absl::FunctionRef<bool()> done,
                  std::chrono::steady_clock::time_point deadline) override;
  void WakeDriver() override { transport_->WakeDriver(); }

  // Stops the transport: pending transfers complete with Cancelled; nothing is delivered after it
  // returns. Call before the JobRuntime that receives the messages is destroyed.
  // Before that (on the first call only) it waits up to Create's `stop_grace` for a probe from
  // every peer this node sent one to and has neither heard from nor lost: such a peer may still be
  // setting up its connection to this node, and UCX 1.13 aborts a process whose connection is
  // closed under it in the middle of that (transport/README.md, *Shutdown*). A peer's probe comes
  // after its side is set up. After a job that started, every peer was heard from, so it waits
  // only for a job aborted while it connected.
  void Stop();

  // Wire format of an actor message (exposed for tests).
  static constexpr size_t kWireMessageBytes = 40;
  // A probe on the wire (any other length than an actor message's).
  static constexpr absl::string_view kProbeMessage = "loom.probe";
  static std::string Encode(const ActorMessage& message);
  static absl::StatusOr<ActorMessage> Decode(absl::string_view bytes);

 private:
  TransportNetwork(int node, absl::Duration stop_grace) : node_(node), stop_grace_(stop_grace) {}
  void OnMessage(PeerId from, absl::string_view bytes);
  void OnPeerError(PeerId peer, const absl::Status& status);
  // Waits (at most stop_grace_) until every peer probed by this node was heard from or lost.
  void WaitForProbedPeers();
  // Whether a probe arrived from `peer` or its connection failed. Call with mutex_ held.
  bool HeardFromOrLost(int peer) const;

  const int node_;
  const absl::Duration stop_grace_;
  std::unique_ptr<Transport> transport_;
  std::mutex mutex_;
  MessageReceiver receiver_;  // guarded by mutex_
  ErrorHandler on_error_;     // guarded by mutex_
  // Notified when a probe arrives or a peer fails.
  std::condition_variable peers_changed_;
  absl::flat_hash_set<int> probed_;            // guarded by mutex_: the peers sent a probe
  absl::flat_hash_set<int> probed_by_;         // guarded by mutex_
  std::map<int, absl::Status> peer_failures_;  // guarded by mutex_: the first error per peer
  absl::Status probe_wait_interrupted_;        // guarded by mutex_
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_TRANSPORT_NETWORK_H_
