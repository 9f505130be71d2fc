#ifndef LOOM_TESTS_RUNTIME_IN_MEMORY_NETWORK_H_
#define LOOM_TESTS_RUNTIME_IN_MEMORY_NETWORK_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "runtime/network.h"

namespace loom::testing {

// The networks of `num_nodes` nodes inside one process, for tests of what runs over a Network.
// Like UCX, a transfer is matched by (destination node, tag) whichever side comes first, the
// bytes are copied and both completions run on a separate thread (never the caller's), and a
// receive of the wrong size fails. Actor messages go to the receiver set for their destination
// node, on that thread too, in the order they were sent.
class InMemoryNetwork {
 public:
  using MessageReceiver = std::function<void(const ActorMessage& message)>;

  explicit InMemoryNetwork(int num_nodes);
  // Cancels every pending transfer (completions with CANCELLED, no bytes written) and joins.
  ~InMemoryNetwork();
  InMemoryNetwork(const InMemoryNetwork&) = delete;
  InMemoryNetwork& operator=(const InMemoryNetwork&) = delete;

  Network* node(int index);

  // Node `node` is lost: every pending and later transfer it posted, or that goes to it, fails
  // with `status`.
  void FailNode(int node, absl::Status status);

  // Where actor messages to `node` go (e.g. JobRuntime::DeliverFromNetwork); set it before
  // anything sends one. A message to a node without a receiver fails to send.
  void SetMessageReceiver(int node, MessageReceiver receiver);

  // Sees every buffer a transfer names before the transfer is accepted; an error refuses it
  // (SendData / ReceiveData return the error), as a transport refuses memory it cannot reach.
  using BufferCheck = std::function<absl::Status(const void* buffer)>;
  void SetBufferCheck(BufferCheck check);

  // Transfers matched so far.
  int64_t transfers() const;
  // Network::WakeDriver calls so far, on any node.
  int64_t driver_wakes() const { return driver_wakes_.load(); }

 private:
  class NodeNetwork;
  struct PendingSend {
    int source = 0;
    const void* buffer = nullptr;
    size_t size = 0;
    Network::Completion done;
  };
  struct PendingReceive {
    void* buffer = nullptr;
    size_t size = 0;
    Network::Completion done;
  };
  using Work = absl::AnyInvocable<void()>;

  absl::Status SendMessage(const ActorMessage& message);
  absl::Status SendData(int source, int destination, Network::Tag tag, const void* buffer,
                        size_t size, Network::Completion done);
  absl::Status ReceiveData(int node, Network::Tag tag, void* buffer, size_t size,
                           Network::Completion done);
  // Under mutex_.
  void PushLocked(Work work);
  void CompleteLocked(Network::Completion done, absl::Status status);
  void MatchLocked(PendingSend send, PendingReceive receive);
  void Loop();

  const int num_nodes_;
  std::vector<std::unique_ptr<NodeNetwork>> nodes_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  // By destination node (guarded by mutex_).
  std::vector<absl::flat_hash_map<Network::Tag, PendingSend>> sends_;
  std::vector<absl::flat_hash_map<Network::Tag, PendingReceive>> receives_;
  std::vector<absl::Status> node_failure_;  // guarded by mutex_
  std::vector<MessageReceiver> receivers_;  // guarded by mutex_
  BufferCheck buffer_check_;                // guarded by mutex_
  std::deque<Work> work_;                   // guarded by mutex_
  bool stopping_ = false;                   // guarded by mutex_
  int64_t transfers_ = 0;                   // guarded by mutex_
  std::atomic<int64_t> driver_wakes_{0};
  std::thread thread_;
};

}  // namespace loom::testing

#endif  // LOOM_TESTS_RUNTIME_IN_MEMORY_NETWORK_H_
