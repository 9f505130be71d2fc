#include "runtime/transfer_group.h"

#include <algorithm>
#include <utility>

#include "glog/logging.h"

namespace loom {

int TransferGroup::Add(int peer, Direction direction) {
  std::lock_guard<std::mutex> lock(mutex_);
  transfers_.push_back(Transfer{peer, direction, false});
  ++pending_;
  return static_cast<int>(transfers_.size()) - 1;
}

Network::Completion TransferGroup::Completion(int index) {
  return [group = shared_from_this(), index](absl::Status status) {
    group->Complete(index, std::move(status));
  };
}

void TransferGroup::Fail(int index, absl::Status status) { Complete(index, std::move(status)); }

void TransferGroup::KeepAlive(std::shared_ptr<const void> buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  kept_alive_.push_back(std::move(buffer));
}

void TransferGroup::Complete(int index, absl::Status status) {
  std::lock_guard<std::mutex> lock(mutex_);
  Transfer& transfer = transfers_[index];
  CHECK(!transfer.done) << "transfer " << index << " completed twice";
  transfer.done = true;
  --pending_;
  if (!status.ok() && error_.ok()) {
    error_ = std::move(status);
    failed_transfer_ = index;
  }
  events_.fetch_add(1, std::memory_order_release);
  changed_.notify_all();
}

void TransferGroup::Interrupt(absl::Status reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (interrupt_reason_.ok()) interrupt_reason_ = std::move(reason);
  events_.fetch_add(1, std::memory_order_release);
  changed_.notify_all();
}

bool TransferGroup::OverLocked(int index, Outcome* outcome) const {
  if (!interrupt_reason_.ok()) {
    *outcome = Outcome::kInterrupted;
  } else if (!error_.ok()) {
    *outcome = Outcome::kFailed;
  } else if (index < 0 ? pending_ == 0 : transfers_[index].done) {
    *outcome = Outcome::kDone;
  } else {
    return false;
  }
  return true;
}

bool TransferGroup::Over(int index) const {
  std::lock_guard<std::mutex> lock(mutex_);
  Outcome outcome;
  return OverLocked(index, &outcome);
}

TransferGroup::Outcome TransferGroup::WaitFor(int index, Clock::time_point deadline,
                                              absl::Duration spin) {
  Outcome outcome;
  std::unique_lock<std::mutex> lock(mutex_);
  if (OverLocked(index, &outcome)) return outcome;
  if (spin > absl::ZeroDuration()) {
    // Waking a parked thread costs milliseconds on small machines; a completion usually follows
    // soon after the previous one.
    const auto until = Clock::now() + absl::ToChronoNanoseconds(spin);
    uint64_t seen = events_.load(std::memory_order_acquire);
    lock.unlock();
    while (Clock::now() < until) {
      const uint64_t now = events_.load(std::memory_order_acquire);
      if (now == seen) continue;
      seen = now;
      lock.lock();
      if (OverLocked(index, &outcome)) return outcome;
      lock.unlock();
    }
    lock.lock();
  }
  while (!OverLocked(index, &outcome)) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout &&
        !OverLocked(index, &outcome)) {
      return Outcome::kTimedOut;
    }
  }
  return outcome;
}

TransferGroup::Outcome TransferGroup::Wait(int index, Clock::time_point deadline,
                                           absl::Duration spin) {
  return WaitFor(index, deadline, spin);
}

TransferGroup::Outcome TransferGroup::WaitAll(Clock::time_point deadline, absl::Duration spin) {
  return WaitFor(-1, deadline, spin);
}

int TransferGroup::failed_transfer() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_transfer_;
}

absl::Status TransferGroup::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

absl::Status TransferGroup::interrupt_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return interrupt_reason_;
}

std::vector<int> TransferGroup::PendingPeers(Direction direction) const {
  std::vector<int> peers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Transfer& transfer : transfers_) {
      if (!transfer.done && transfer.direction == direction) peers.push_back(transfer.peer);
    }
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

int TransferGroup::peer(int index) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return transfers_[index].peer;
}

TransferGroup::Direction TransferGroup::direction(int index) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return transfers_[index].direction;
}

}  // namespace loom
