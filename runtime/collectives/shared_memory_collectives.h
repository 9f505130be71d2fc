#ifndef LOOM_RUNTIME_COLLECTIVES_SHARED_MEMORY_COLLECTIVES_H_
#define LOOM_RUNTIME_COLLECTIVES_SHARED_MEMORY_COLLECTIVES_H_

// The shared-memory collective backend, for communicators whose ranks are CPU devices of this node
// (threads of one process): SharedMemoryCollectives runs each collective as two rendezvous of the
// ranks around direct reads of each other's buffers, without staging. JobRuntime makes it for such
// communicators when no factory supplies a backend.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/plan.pb.h"
#include "runtime/collective_backend.h"

namespace loom {

// The collective backend of a communicator whose ranks are threads of this process (CPU devices
// of one node share host memory). No data is staged: each collective is two rendezvous of the
// ranks around direct reads of the peers' buffers.
//
//  1. Arrival: each rank deposits its call (rank, conf, input and output views). The last to
//     arrive checks that every rank runs the same collective (sequence, name, kind, settings) at
//     the position the communicator's global order expects, and that the shapes fit together;
//     on a mismatch the backend fails with INTERNAL (or INVALID_ARGUMENT for shapes) naming both
//     collectives and ranks.
//  2. Every rank computes its part, reading its peers' inputs in place: its own output for
//     all-gather, reduce-scatter and all-to-all; for all-reduce, rank r reduces the r-th balanced
//     chunk of the elements and writes it into every rank's output (each element is reduced once,
//     not once per rank; every rank sums in rank order, so all outputs are bit-identical).
//  3. Departure: nobody returns (so nobody's input slot is released or output published) until
//     every rank has finished step 2.
//
// A generation counter (collectives completed) separates consecutive collectives: a rank may
// arrive for the next one while a slow peer still leaves the previous one.
//
// Waits end: Abort wakes the arrival wait; both waits have a deadline (`timeout`, from each wait's
// start) after which the collective fails with DEADLINE_EXCEEDED naming the ranks that did not
// arrive (or finish). The departure wait does not end on Abort: peers that passed the arrival
// are computing and finish in bounded time, and returning earlier would let a buffer be reused
// while a peer still reads it. A failure is permanent: every later Run returns it.
class SharedMemoryCollectives final : public CollectiveBackend {
 public:
  struct Options {
    // How long a rank waits for its peers (to arrive, and to finish) before failing.
    absl::Duration timeout = absl::Seconds(60);
    // How long a waiting rank polls before it parks on a condition variable.
    absl::Duration spin = absl::Microseconds(50);
  };

  SharedMemoryCollectives(const plan::Communicator& communicator, Options options);

  const std::string& communicator() const override { return name_; }
  int size() const override { return size_; }
  absl::string_view transport() const override { return "shared_memory"; }

  absl::Status Run(const CollectiveCall& call) override;
  void Abort(absl::Status reason) override;

 private:
  // Under mutex_: the first failure wins; wakes every waiter.
  void FailLocked(absl::Status status);
  // Under mutex_, by the last rank to arrive: the calls of all ranks form one collective.
  absl::Status CheckCallsLocked(int64_t generation) const;
  // Polls `counter` until it exceeds `generation`, for up to options_.spin.
  void Spin(const std::atomic<int64_t>& counter, int64_t generation) const;
  // Ranks whose `done` entry is false, as "1, 3".
  static std::string RankList(const std::vector<bool>& done);

  // Step 2 for `rank`; reads calls_ (stable between the two rendezvous).
  void Compute(int rank) const;

  const std::string name_;
  const int size_;
  const int num_collectives_;
  const Options options_;

  std::mutex mutex_;
  std::condition_variable changed_;
  // Guarded by mutex_ (and read without it by ranks between the two rendezvous, when nobody
  // writes it).
  std::vector<const CollectiveCall*> calls_;  // by rank, for the collective in progress
  int arrived_ = 0;                           // guarded by mutex_
  int departed_ = 0;                          // guarded by mutex_
  std::vector<bool> has_departed_;            // guarded by mutex_, by rank
  absl::Status failure_;                      // guarded by mutex_
  // Written under mutex_; also polled without it while spinning.
  std::atomic<int64_t> arrivals_completed_{0};    // collectives all ranks arrived at
  std::atomic<int64_t> departures_completed_{0};  // collectives all ranks left: the generation
  std::atomic<bool> failed_{false};
};

}  // namespace loom

#endif  // LOOM_RUNTIME_COLLECTIVES_SHARED_MEMORY_COLLECTIVES_H_
