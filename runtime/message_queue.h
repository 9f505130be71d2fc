#ifndef LOOM_RUNTIME_MESSAGE_QUEUE_H_
#define LOOM_RUNTIME_MESSAGE_QUEUE_H_

// MessageQueue: the inbox of a stream thread, one per StreamThread. Any thread pushes ActorMessages
// to it; the stream thread takes them all at once and, when there are none, spins briefly before it
// parks.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/time/time.h"
#include "runtime/message.h"

namespace loom {

// The multi-producer, single-consumer inbox of a stream thread. Producers append under a short
// lock; the consumer takes everything at once. The consumer spins briefly before parking, because
// waking a parked thread on this machine class can take milliseconds.
class MessageQueue {
 public:
  void Push(const ActorMessage& message);

  // Moves every queued message into `messages` (appending). Returns false when there was none.
  bool TakeAll(std::vector<ActorMessage>* messages);

  // Returns when a message is queued, after `spin` of busy polling and then up to `park` asleep.
  void WaitForMessages(absl::Duration spin, absl::Duration park);

  bool HasMessages() const { return non_empty_.load(std::memory_order_acquire); }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<ActorMessage> pending_;  // guarded by mutex_
  bool consumer_parked_ = false;       // guarded by mutex_
  std::atomic<bool> non_empty_{false};
};

}  // namespace loom

#endif  // LOOM_RUNTIME_MESSAGE_QUEUE_H_
