#ifndef LOOM_TRANSPORT_TRANSPORT_H_
#define LOOM_TRANSPORT_TRANSPORT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <variant>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/ucx_context.h"
#include "transport/ucx_endpoint.h"
#include "transport/ucx_worker.h"

namespace loom::transport {

// A node's identity on the network: the node index of the plan (an actor id's node field).
using PeerId = uint32_t;
// Names one data transfer; sender and receiver agree on it (the cluster packs the receive actor,
// register and slot into it). A receive matches exactly one send with the same tag, from any peer.
using DataTag = uint64_t;

// Called on the progress thread for every message received; `bytes` is valid during the call
// only. Must not block (copy and hand off); may call Send/SendData/ReceiveData, not Stop.
using MessageHandler = absl::AnyInvocable<void(PeerId from, absl::string_view bytes)>;
// Called on the progress thread, at most once per peer, when the connection to `peer` fails (the
// peer died or became unreachable, or a message to it could not be sent).
using PeerErrorHandler = absl::AnyInvocable<void(PeerId peer, const absl::Status& status)>;
// Completion of SendData: OK once the buffer may be reused.
using SendCallback = absl::AnyInvocable<void(absl::Status status)>;
// Completion of ReceiveData: the number of bytes received, or why nothing was.
using ReceiveCallback = absl::AnyInvocable<void(absl::StatusOr<size_t> received_bytes)>;

struct TransportOptions {
  PeerId self = 0;
  MessageHandler on_message;
  PeerErrorHandler on_peer_error;
  UcxContextOptions context;
  // After the last activity the progress thread polls this long before sleeping on the worker's
  // event file descriptor (waking a sleeping thread costs milliseconds on small machines; spinning
  // costs a core).
  absl::Duration progress_spin = absl::Microseconds(20);
  // Longest sleep between progress calls (UCX's timers, e.g. keepalive, need progress).
  absl::Duration park_timeout = absl::Milliseconds(50);
  // Deadline of AddPeer (waits for the progress thread to create the endpoint).
  absl::Duration add_peer_deadline = absl::Seconds(10);
  // Longest time Stop() waits for cancelled operations and closing endpoints to complete.
  absl::Duration stop_deadline = absl::Seconds(5);
};

// Moves bytes between the nodes of a cluster over UCX: small actor messages (active messages) and
// register data (tag messages into a buffer the receiver posted). One progress thread per
// Transport owns the UCX worker and runs every callback; the public methods only queue work for
// it, so they may be called from any thread, callbacks included.
//
// Every operation that was queued completes exactly once: its callback (or, for messages, the peer
// error handler on failure) is called with OK, the error, or Cancelled when Stop() came first.
class Transport {
 public:
  // Largest message Send accepts. Messages go eagerly (no rendezvous): they are for small structs.
  static constexpr size_t kMaxMessageBytes = 64 * 1024;

  static absl::StatusOr<std::unique_ptr<Transport>> Create(TransportOptions options);

  // Stop()s.
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  PeerId self() const { return self_; }

  // This node's worker address: opaque bytes a peer passes to its AddPeer.
  const std::string& address() const { return address_; }

  // Connects to `peer` at `address` (its Transport::address()). Waits at most the option's
  // deadline for the progress thread to create the endpoint (which does not wait for the peer).
  absl::Status AddPeer(PeerId peer, absl::string_view address);

  // Sends a copy of `bytes` to `peer`'s message handler. Messages to one peer arrive in order.
  // Returns an error only when the message cannot be queued (too large, stopped); a failure to
  // deliver goes to the peer error handler.
  absl::Status Send(PeerId peer, absl::string_view bytes);

  // Sends `size` bytes at `buffer` to the receive posted with `tag` on `peer`. The buffer must stay
  // valid and unchanged until `callback` runs. Returns an error (and never calls `callback`) only
  // when the transfer cannot be queued.
  absl::Status SendData(PeerId peer, DataTag tag, const void* buffer, size_t size,
                        SendCallback callback);

  // Receives the transfer sent with `tag` into `buffer` (at most `size` bytes; a larger transfer
  // fails with InvalidArgument). The buffer must stay valid until `callback` runs. Returns an error
  // (and never calls `callback`) only when the receive cannot be queued.
  absl::Status ReceiveData(DataTag tag, void* buffer, size_t size, ReceiveCallback callback);

  // Stops the progress thread and joins it: queued and pending operations complete with
  // Cancelled, endpoints are closed and the worker is destroyed, which closes its connections
  // (peers see this node fail). Idempotent; not from a callback.
  void Stop();

 private:
  struct Operation;
  struct Peer;
  struct AddPeerResult;
  struct AddPeerCommand {
    PeerId peer;
    std::string address;
    std::shared_ptr<AddPeerResult> result;
  };
  using Command = std::variant<AddPeerCommand, std::unique_ptr<Operation>>;

  Transport(TransportOptions options, std::unique_ptr<UcxContext> context,
            std::unique_ptr<UcxWorker> worker, int wake_fd);

  absl::Status Enqueue(Command command);
  void Wake();

  // Progress thread.
  void ProgressLoop();
  bool RunCommands();
  void RunCommand(Command command);
  void AddPeerNow(AddPeerCommand& command);
  void StartOperation(std::unique_ptr<Operation> operation);
  void Complete(Operation* operation, ucs_status_t status, size_t received_bytes);
  void Finish(std::unique_ptr<Operation> operation, absl::Status status, size_t received_bytes);
  void OnPeerFailed(Peer* peer, const absl::Status& status);
  void CloseFailedEndpoints();
  void Shutdown();
  std::string Describe(const Operation& operation) const;

  static void OnSendDone(void* request, ucs_status_t status, void* user_data);
  static void OnReceiveDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                            void* user_data);
  static void OnEndpointError(void* argument, ucp_ep_h endpoint, ucs_status_t status);
  static ucs_status_t OnActiveMessage(void* argument, const void* header, size_t header_length,
                                      void* data, size_t length, const ucp_am_recv_param_t* param);

  const PeerId self_;
  // Used by the progress thread only; moved out of the options before options_ takes the rest.
  MessageHandler on_message_;
  PeerErrorHandler on_peer_error_;
  TransportOptions options_;  // not changed after construction
  std::unique_ptr<UcxContext> context_;
  std::unique_ptr<UcxWorker> worker_;  // destroyed by the progress thread as it ends
  const std::string address_;
  const int wake_fd_;

  std::mutex mutex_;
  std::deque<Command> commands_;  // guarded by mutex_
  bool stop_requested_ = false;   // guarded by mutex_
  std::atomic<bool> has_commands_{false};
  std::atomic<bool> sleeping_{false};
  std::mutex stop_mutex_;  // serialises Stop()
  std::thread progress_thread_;

  // Progress thread only.
  bool shutting_down_ = false;
  absl::flat_hash_map<PeerId, std::unique_ptr<Peer>> peers_;
  absl::flat_hash_set<Operation*> pending_;  // owned; started, waiting for UCX
  std::vector<Peer*> failed_to_close_;
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_TRANSPORT_H_
