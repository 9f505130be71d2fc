#ifndef LOOM_RUNTIME_NETWORK_H_
#define LOOM_RUNTIME_NETWORK_H_

// Network: what the runtime of one node needs to reach the job's other nodes: actor messages,
// tagged data transfers into buffers the receiver posted, and driving the network from a thread
// that waits for its transfers. TransportNetwork implements it over UCX
// (transport/transport_network.h); JobRuntime, the SEND/RECEIVE actors and the network collectives
// use it.

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/message.h"

namespace loom {

// What the runtime of one node needs from the network between the nodes of a job (DESIGN.md §4):
// actor messages to actors on other nodes, and data transfers into buffers the receiver posted.
// The cluster implements it over UCX (transport/transport_network.h); tests may implement it in
// memory. One Network per node per job; every method may be called from any thread.
//
// Incoming actor messages are handed to the node's JobRuntime (JobRuntime::DeliverFromNetwork).
class Network {
 public:
  // Names one data transfer; the receiver posts a receive with the tag, the sender sends with it.
  // A receive matches exactly one send with the same tag, from any node. Tags with
  // kCollectiveTagBit set belong to collective backends; the others to send/receive actors.
  using Tag = uint64_t;
  static constexpr Tag kCollectiveTagBit = Tag{1} << 63;

  // Called once per transfer, on a network thread: must not block (hand work to a stream thread).
  using Completion = absl::AnyInvocable<void(absl::Status status)>;

  virtual ~Network() = default;

  // This node's index (the node field of its actors' ids).
  virtual int node() const = 0;
  // The transport's name, a metrics label ("ucx").
  virtual absl::string_view transport() const = 0;

  // Sends `message` to the node of message.destination. Messages from one node to another arrive
  // in the order they were sent. An error means the message could not be queued; a failure to
  // deliver fails the job through the implementation's error path (the peer is lost).
  virtual absl::Status SendMessage(const ActorMessage& message) = 0;

  // Sends `size` bytes at `buffer` to the receive posted with `tag` on node `destination`. The
  // buffer stays untouched until `done` runs with OK (the buffer may be reused) or an error.
  virtual absl::Status SendData(int destination, Tag tag, const void* buffer, size_t size,
                                Completion done) = 0;

  // Receives the transfer sent with `tag` into `buffer`, which must be exactly `size` bytes long
  // (any other size fails the transfer). `done` runs once the bytes are in place, or with the
  // error.
  virtual absl::Status ReceiveData(Tag tag, void* buffer, size_t size, Completion done) = 0;

  // Lets the calling thread, which is about to wait for transfers it posted, move the network
  // forward itself until `done()` holds or `deadline` passes, instead of waiting for the network's
  // thread to hand it every completion (a wake-up each). Completions and incoming messages may run
  // on the calling thread meanwhile, so it must hold no lock they take; `done` must be cheap, and
  // a wait ended from another thread is seen after WakeDriver (below). Returns whether `done()`
  // held; false also when the calling thread stopped driving before (another thread asked to
  // drive, the network stopped) or could not drive (the implementation has no such mode): the
  // caller then waits as usual.
  // Transfers with kCollectiveTagBit are posted for their poster to drive: a collective backend
  // calls this before it waits for them (until then they may not have started).
  virtual bool DriveUntil(absl::FunctionRef<bool()> done,
                          std::chrono::steady_clock::time_point deadline) = 0;
  // Makes a thread in DriveUntil call its `done` again at once, for a `done` whose answer changed
  // outside the network (another thread aborted the wait); without it, a driver sleeping on the
  // network's events sees that change only after its next event or within a few tens of
  // milliseconds. Any thread; nothing happens where no thread drives.
  virtual void WakeDriver() = 0;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_NETWORK_H_
