#ifndef LOOM_RUNTIME_TRANSFER_GROUP_H_
#define LOOM_RUNTIME_TRANSFER_GROUP_H_

// TransferGroup: the network transfers of one rank's part of one collective, posted and awaited on
// the rank's thread and completed on network threads, with how a wait ended (done, failed,
// interrupted, timed out) and the staging buffers it keeps alive until every completion ran. Used
// by NetworkCollectives.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "runtime/network.h"

namespace loom {

// The network transfers of one rank's part of one collective: posted on the rank's thread,
// completed on network threads, awaited on the rank's thread.
//
// Completions never block: each takes the group's mutex for a few stores and notifies. They own
// the group (a shared_ptr in the completion), and the group owns the staging buffers its transfers
// read or write (KeepAlive), so a transfer that completes after its rank gave up (abort, deadline)
// writes into memory that still exists, and touches nothing of the backend that may be gone.
class TransferGroup : public std::enable_shared_from_this<TransferGroup> {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Direction { kSend, kReceive };

  // How a wait ended.
  enum class Outcome {
    kDone,         // the awaited transfers completed OK
    kFailed,       // a transfer of the group failed: failed_transfer() and error()
    kInterrupted,  // Interrupt() was called: interrupt_reason()
    kTimedOut,     // the deadline passed first
  };

  // Registers a transfer with `peer` (a rank) and returns its index. The caller then posts it
  // with Completion(index).
  int Add(int peer, Direction direction);
  // The completion to post transfer `index` with; keeps the group alive until it runs.
  Network::Completion Completion(int index);
  // Marks transfer `index` failed with `status` without a completion (it could not be posted).
  void Fail(int index, absl::Status status);
  // Keeps `buffer` alive as long as the group (staging memory that transfers read or write).
  void KeepAlive(std::shared_ptr<const void> buffer);

  // Ends every current and future wait with kInterrupted; the first reason is kept.
  void Interrupt(absl::Status reason);

  // Waits until transfer `index` (or every transfer added so far) completed, a transfer failed,
  // the group is interrupted, or `deadline` passes. Polls for `spin` before parking.
  Outcome Wait(int index, Clock::time_point deadline, absl::Duration spin);
  Outcome WaitAll(Clock::time_point deadline, absl::Duration spin);

  // Whether a wait for transfer `index` (-1: every transfer added so far) would return now.
  bool Over(int index) const;

  // After kFailed: which transfer failed first, and why.
  int failed_transfer() const;
  absl::Status error() const;
  absl::Status interrupt_reason() const;
  // The peers of transfers in `direction` that have not completed, ascending, without repeats.
  std::vector<int> PendingPeers(Direction direction) const;
  int peer(int index) const;
  Direction direction(int index) const;

 private:
  struct Transfer {
    int peer = 0;
    Direction direction = Direction::kSend;
    bool done = false;
  };

  void Complete(int index, absl::Status status);
  // Under mutex_: whether the wait for `index` (-1: all) is over, and how.
  bool OverLocked(int index, Outcome* outcome) const;
  Outcome WaitFor(int index, Clock::time_point deadline, absl::Duration spin);

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Transfer> transfers_;                      // guarded by mutex_
  int pending_ = 0;                                      // guarded by mutex_
  int failed_transfer_ = -1;                             // guarded by mutex_
  absl::Status error_;                                   // guarded by mutex_
  absl::Status interrupt_reason_;                        // guarded by mutex_
  std::vector<std::shared_ptr<const void>> kept_alive_;  // guarded by mutex_
  // Bumped (under mutex_) by every completion and interrupt; spinning waiters poll it.
  std::atomic<uint64_t> events_{0};
};

}  // namespace loom

#endif  // LOOM_RUNTIME_TRANSFER_GROUP_H_
