#include "runtime/message_queue.h"

#include <sched.h>

#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace loom {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace

void MessageQueue::Push(const ActorMessage& message) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(message);
    non_empty_.store(true, std::memory_order_release);
    wake = consumer_parked_;
  }
  if (wake) wake_.notify_one();
}

bool MessageQueue::TakeAll(std::vector<ActorMessage>* messages) {
  if (!non_empty_.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (pending_.empty()) return false;
  if (messages->empty()) {
    messages->swap(pending_);
  } else {
    messages->insert(messages->end(), pending_.begin(), pending_.end());
    pending_.clear();
  }
  non_empty_.store(false, std::memory_order_release);
  return true;
}

void MessageQueue::WaitForMessages(absl::Duration spin, absl::Duration park) {
  if (HasMessages()) return;
  // Spin, but yield the core between short bursts: when more stream threads than cores are busy
  // (4 pipeline stages on 2 cores), a peer that would send the next message may need this core,
  // and a pure spin would make every hop cost the whole spin.
  const auto spin_deadline = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(spin);
  while (std::chrono::steady_clock::now() < spin_deadline) {
    for (int i = 0; i < 64; ++i) {
      if (HasMessages()) return;
      CpuRelax();
    }
    sched_yield();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  consumer_parked_ = true;
  wake_.wait_for(lock, absl::ToChronoNanoseconds(park), [this] { return !pending_.empty(); });
  consumer_parked_ = false;
}

}  // namespace loom
