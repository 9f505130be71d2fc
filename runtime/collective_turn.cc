#include "runtime/collective_turn.h"

#include "absl/strings/str_cat.h"

namespace loom {

CollectiveTurn::CollectiveTurn(std::string communicator, int num_collectives)
    : communicator_(std::move(communicator)),
      members_(num_collectives),
      has_member_(num_collectives, false),
      exhausted_(num_collectives, false) {}

absl::Status CollectiveTurn::AddMember(int64_t sequence, ActorId actor) {
  if (sequence < 0 || sequence >= num_collectives()) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", sequence, " is outside [0, ",
                                                   num_collectives(), ") of communicator '",
                                                   communicator_, "'"));
  }
  if (has_member_[sequence]) {
    return absl::InvalidArgumentError(absl::StrCat("communicator '", communicator_,
                                                   "' has two collectives with sequence ", sequence,
                                                   " on this stream"));
  }
  has_member_[sequence] = true;
  members_[sequence] = actor;
  return absl::OkStatus();
}

bool CollectiveTurn::Advance() {
  if (ended_) return false;
  current_ = (current_ + 1) % num_collectives();
  if (exhausted_[current_]) ended_ = true;
  return ended_;
}

bool CollectiveTurn::MarkExhausted(int64_t sequence) {
  exhausted_[sequence] = true;
  if (ended_ || current_ != sequence) return false;
  ended_ = true;
  return true;
}

}  // namespace loom
