#ifndef LOOM_TRANSPORT_TRANSPORT_H_
#define LOOM_TRANSPORT_TRANSPORT_H_

// Transport: moves actor messages and register data between the nodes of a cluster over UCX, with
// one progress thread per Transport, DriveUntil for a thread that waits for its own transfers, and
// same-host copies between processes of one host. Also its options (TransportOptions), the peer and
// tag types, and the callbacks it runs. TransportNetwork builds the runtime's Network on it.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "transport/same_host.h"
#include "transport/same_host_mailbox.h"
#include "transport/ucx_context.h"
#include "transport/ucx_endpoint.h"
#include "transport/ucx_worker.h"

namespace loom::transport {

// A node's identity on the network: the node index of the plan (an actor id's node field).
using PeerId = uint32_t;
// Names one data transfer; sender and receiver agree on it (the cluster packs the receive actor,
// register and slot into it). A receive matches exactly one send with the same tag, from any peer.
using DataTag = uint64_t;

// Called on the thread driving the worker (the progress thread, or a DriveUntil caller) for every
// message received; `bytes` is valid during the call only. Must not block (copy and hand off); may
// call Send/SendData/ReceiveData, not Stop.
using MessageHandler = absl::AnyInvocable<void(PeerId from, absl::string_view bytes)>;
// Called on the thread driving the worker, at most once per peer, when the connection to `peer`
// fails (the peer died or became unreachable, or a message to it could not be sent).
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
  // After the last activity of the UCX worker (or the last queued command) the progress thread
  // polls this long before sleeping on the worker's event file descriptor. Same-host mailbox
  // records alone (the same-host transfers' announcements, answers and inline data) do not count.
  // A thread in DriveUntil polls as long after its last activity of any kind, while this process
  // and its same-host peers may each run on a CPU of their own (their affinity: a cpuset,
  // taskset, `loomctl cluster up --bind-cpus`; transport/same_host_cpus.h). (Why, and
  // measurements: transport/README.md, "One worker per Transport" and "A waiting thread may drive
  // the worker itself"; docs/PERFORMANCE.md, alltoall.)
  absl::Duration progress_spin = absl::Microseconds(20);
  // Where they cannot (more same-host processes than CPUs for them), a thread in DriveUntil polls
  // this long after its last activity, calling sched_yield() between rounds, before it sleeps.
  // (Why: docs/ARCHITECTURE.md, "Collectives between nodes"; measured in docs/PERFORMANCE.md,
  // alltoall, *A driver yields between polls where CPUs are shared*.)
  absl::Duration shared_cpu_poll = absl::Milliseconds(2);
  // Longest sleep between progress calls (UCX's timers, e.g. keepalive, need progress).
  absl::Duration park_timeout = absl::Milliseconds(50);
  // Deadline of AddPeer (waits for the progress thread to create the endpoint).
  absl::Duration add_peer_deadline = absl::Seconds(10);
  // Longest time Stop() waits for cancelled operations and closing endpoints to complete.
  absl::Duration stop_deadline = absl::Seconds(5);
  // Data to a peer on the same host go by same-host copy (transport/same_host.h) when the peer
  // could read this process's memory, unless this is false or UCX's transport list excludes
  // `cma` (e.g. UCX_TLS=tcp): then everything goes through UCX.
  bool same_host_copies = true;
  // Smaller transfers go through UCX even to such a peer. The smallest (up to kMaxInlineBytes,
  // e.g. the collectives' headers) go inline through the peer's mailbox where there is one. (Why,
  // and the measured crossover: transport/README.md, "Same-host copies".)
  size_t same_host_copy_min_bytes = 32 * 1024;
};

// Moves bytes between the nodes of a cluster over UCX: small actor messages (active messages) and
// register data (tag messages into a buffer the receiver posted). One progress thread per
// Transport drives the UCX worker and runs the callbacks; the public methods only queue work for
// it, so they may be called from any thread, callbacks included.
//
// A thread about to wait for its own transfers may drive the worker itself (DriveUntil): the
// worker is a token that one thread holds at a time, the progress thread holds it except while it
// sleeps or a driver waits for it, and callbacks run on whichever thread holds it. That saves the
// hand-offs a wait otherwise costs (waking the progress thread for the posts, and the progress
// thread waking the waiter for every completion).
//
// Every operation that was queued completes exactly once: its callback (or, for messages, the peer
// error handler on failure) is called with OK, the error, or Cancelled when Stop() came first.
//
// Data between processes of one host take a same-host copy (transport/same_host.h): the sender
// announces its buffer in a message, the receiver copies it with process_vm_readv once its receive
// is posted and answers when done. The messages travel through the peer's same-host mailbox
// (transport/same_host_mailbox.h) where it has one, otherwise on its UCX endpoint; the endpoint
// stays in either case, so a peer's failure is detected and reported exactly as for UCX
// transfers.
class Transport {
 public:
  // Largest message Send accepts. Messages go eagerly (no rendezvous): they are for small structs.
  static constexpr size_t kMaxMessageBytes = 64 * 1024;
  // Largest SendData to a same-host peer that goes inline through its mailbox, data and all, in
  // one message there (with the 32 bytes that say what it is).
  static constexpr size_t kMaxInlineBytes = Mailbox::kMaxMessageBytes - 32;

  // How SendData and ReceiveData queue their operation: kWake wakes the progress thread when it
  // sleeps; kDeferred leaves it queued for the caller's DriveUntil, which comes next and starts it
  // without that wake-up (a sleeping progress thread still looks at its queue every
  // options.park_timeout, so a forgotten drive costs time, not the operation). A kDeferred
  // transfer's same-host messages (its announcement or inline data, and the answer to an
  // announcement) wake only a thread of the peer that drives, not its idle progress thread: both
  // ends of a kDeferred transfer are meant to be driven (the network collectives'). A peer whose
  // end is not finds them at its next round of work, at the latest after its park timeout. While
  // kDeferred operations of this node are pending, its progress thread wakes for such messages
  // too, so that a wait a DriveUntil ended early (another driver, the deadline) is not held up.
  enum class Queueing { kWake, kDeferred };

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
                        SendCallback callback, Queueing queueing = Queueing::kWake);

  // Receives the transfer sent with `tag` into `buffer` (at most `size` bytes; a larger transfer
  // fails with InvalidArgument). The buffer must stay valid until `callback` runs. Returns an error
  // (and never calls `callback`) only when the receive cannot be queued.
  absl::Status ReceiveData(DataTag tag, void* buffer, size_t size, ReceiveCallback callback,
                           Queueing queueing = Queueing::kWake);

  // Drives the worker on the calling thread until `done()` holds, `deadline` passes, Stop() is
  // called or another thread asks to drive: takes the token from the progress thread (which hands
  // it over within one round of its work) or from another driver (woken to let go at once), runs
  // the queued operations (kDeferred ones included), progresses UCX and sleeps on its events
  // between rounds. Callbacks run on the calling thread meanwhile, so it must hold no lock they
  // take. `done` is called after every round and must be cheap; a wait it ends from another
  // thread is seen within options.park_timeout, or at once after WakeDriver. Returns whether
  // `done()` held; otherwise the caller waits for its callbacks as usual (the progress thread or
  // the next driver runs them).
  bool DriveUntil(absl::FunctionRef<bool()> done, absl::Time deadline);
  // Makes the thread in DriveUntil run a round (and call its `done`) at once instead of at its
  // next event or park timeout: for a `done` that another thread made true (an abort). Where
  // nobody drives it wakes the progress thread, which finds nothing to do. Any thread.
  void WakeDriver() { Wake(); }

  // Whether data to `peer` go by same-host copy (the peer announced that it can read this
  // process); for tests and diagnostics. Only once the peer's announcement arrived.
  bool CopiesDirectlyTo(PeerId peer) const;
  // Whether this node's same-host copy messages to `peer` go through the peer's mailbox (this
  // process could map it); for tests and diagnostics. Once AddPeer returned.
  bool PostsToMailboxOf(PeerId peer) const;
  // Whether this process and the same-host peers found so far (those whose memory it can read,
  // probed when added) may run on a CPU each (transport/same_host_cpus.h): a thread in DriveUntil
  // then polls busily before it sleeps (TransportOptions::progress_spin), otherwise it yields its
  // CPU between polls (TransportOptions::shared_cpu_poll). For tests and diagnostics.
  bool SameHostProcessesHaveACpuEach() const;

  // Stops the progress thread and joins it: queued and pending operations complete with
  // Cancelled, endpoints are closed and the worker is destroyed, which closes its connections
  // (peers see this node fail). Idempotent; not from a callback.
  void Stop();

 private:
  // Defined in transport/transport_operation.h.
  struct Operation;
  struct Peer;
  // The same-host copy protocol: its messages, its state and their handling
  // (transport/same_host_copies.h).
  class SameHostCopies;
  struct AddPeerResult;
  struct AddPeerCommand {
    PeerId peer;
    std::string address;
    std::shared_ptr<AddPeerResult> result;
  };
  using Command = std::variant<AddPeerCommand, std::unique_ptr<Operation>>;

  Transport(TransportOptions options, std::unique_ptr<UcxContext> context,
            std::unique_ptr<UcxWorker> worker, int wake_fd, bool same_host_copies,
            std::unique_ptr<Mailbox> mailbox);

  absl::Status Enqueue(Command command, Queueing queueing = Queueing::kWake);
  void Wake();

  // With the worker token (worker_mutex_) held.
  void ProgressLoop();
  // One round of work: queued commands, UCX progress, same-host copy messages, failed endpoints.
  // Returns whether anything was done; sets `stop` (and does nothing) once Stop() was called.
  // `worker_busy`, when given, says whether the commands or UCX did anything (the mailbox aside).
  bool Step(bool& stop, bool* worker_busy = nullptr);
  // Arms the worker and sleeps until its events, the wake-up eventfd or `timeout`. `token`, when
  // given, is let go of while sleeping.
  void Park(absl::Duration timeout, std::unique_lock<std::mutex>* token);
  // Progress thread: lets the waiting drivers have the token, and takes it back after them.
  void HandOver(std::unique_lock<std::mutex>& token);
  // Runs the queued commands and returns whether there were any; sets `stop` instead (running
  // none) once Stop() was called.
  bool RunCommands(bool& stop);
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
  // Used by the token holder only; moved out of the options before options_ takes the rest.
  MessageHandler on_message_;
  PeerErrorHandler on_peer_error_;
  TransportOptions options_;  // not changed after construction
  std::unique_ptr<UcxContext> context_;
  std::unique_ptr<UcxWorker> worker_;  // destroyed by the progress thread as it ends
  const int wake_fd_;                  // wakes the thread sleeping on the worker (Park)
  // Same-host copies: this process's identity and mailbox, which peers can read us, the copies
  // in flight. Before address_, which carries the identity.
  const std::unique_ptr<SameHostCopies> copies_;
  const std::string address_;

  // The worker token: whoever holds it drives the worker and owns the state below "Token holder
  // only". The progress thread holds it except while it sleeps or lets a driver have it.
  std::mutex worker_mutex_;
  std::condition_variable token_returned_;  // a driver let go of the token
  std::atomic<int> drivers_waiting_{0};     // threads in DriveUntil waiting for the token
  std::mutex mutex_;
  std::deque<Command> commands_ ABSL_GUARDED_BY(mutex_);
  bool stop_requested_ ABSL_GUARDED_BY(mutex_) = false;
  std::atomic<bool> has_commands_{false};
  // True while the progress thread sleeps or waits for the token (and before it first runs):
  // then a queued command must write the wake-up eventfd, which wakes a driver too.
  std::atomic<bool> sleeping_{true};
  std::mutex stop_mutex_;  // serialises Stop()
  std::thread progress_thread_;

  // Token holder only.
  bool shutting_down_ = false;
  absl::flat_hash_map<PeerId, std::unique_ptr<Peer>> peers_;
  absl::flat_hash_set<Operation*> pending_;  // owned; started, waiting for UCX
  // Operations queued kDeferred that started and did not finish: while there are any, the progress
  // thread parks as a driver (Mailbox::Reader::kDriver), standing in for a driver that stopped
  // early.
  int driven_pending_ = 0;
  std::vector<Peer*> failed_to_close_;
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_TRANSPORT_H_
