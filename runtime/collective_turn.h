#ifndef LOOM_RUNTIME_COLLECTIVE_TURN_H_
#define LOOM_RUNTIME_COLLECTIVE_TURN_H_

// CollectiveTurn: the order in which one communicator's collective actors on one stream may act
// (sequence 0, 1, ..., n-1, then again for the next piece), and how that order ends when a member
// is exhausted. JobRuntime makes one per (stream, communicator); CollectiveActor waits for its turn
// and passes it on.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/actor_id.h"

namespace loom {

// The local order of one communicator's collectives on one rank: its collective actors (all on
// one communication stream) act strictly in the order sequence 0, 1, ..., n-1, 0, 1, ... (each
// once per piece), whatever order their inputs arrive in, so that ranks never diverge because of
// scheduling. Shared by those actors and touched only by their thread: no locks.
//
// Exhaustion: a member that can never act again ends the order when its turn comes (every rank
// reaches that point after the same number of collectives); then every member is exhausted.
class CollectiveTurn {
 public:
  CollectiveTurn(std::string communicator, int num_collectives);

  // Before the job starts: the actor that runs `sequence`.
  absl::Status AddMember(int64_t sequence, ActorId actor);

  const std::string& communicator() const { return communicator_; }
  int num_collectives() const { return static_cast<int>(members_.size()); }
  // The sequence whose turn it is.
  int64_t current() const { return current_; }
  bool IsTurnOf(int64_t sequence) const { return !ended_ && current_ == sequence; }
  bool ended() const { return ended_; }
  ActorId member(int64_t sequence) const { return members_[sequence]; }
  const std::vector<ActorId>& members() const { return members_; }

  // After the current member acted: the next sequence's turn. Returns whether that ended the
  // order (the next member was exhausted).
  bool Advance();
  // `sequence`'s member can never act again. Returns whether that ended the order (it was its
  // turn).
  bool MarkExhausted(int64_t sequence);

 private:
  std::string communicator_;
  std::vector<ActorId> members_;  // by sequence
  std::vector<bool> has_member_;  // by sequence
  std::vector<bool> exhausted_;   // by sequence
  int64_t current_ = 0;
  bool ended_ = false;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_COLLECTIVE_TURN_H_
