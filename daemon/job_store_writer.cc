#include "daemon/job_store_writer.h"

#include <pthread.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace loom::daemon {

JobStoreWriter::JobStoreWriter(const JobStore* store) : store_(store) {
  thread_ = std::thread([this] { Loop(); });
}

JobStoreWriter::~JobStoreWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

uint64_t JobStoreWriter::Enqueue(std::string what, Write write) {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(Queued{std::move(what), std::move(write)});
    ticket = ++queued_;
  }
  changed_.notify_all();
  return ticket;
}

void JobStoreWriter::WaitFor(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return done_ >= ticket; });
}

absl::Status JobStoreWriter::WaitForWrites(uint64_t first, uint64_t last) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return done_ >= last; });
  auto failure = failures_.lower_bound(first);
  if (failure == failures_.end() || failure->first > last) return absl::OkStatus();
  return failure->second;
}

void JobStoreWriter::Loop() {
  pthread_setname_np(pthread_self(), "job-store");
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything is written
    Queued next = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    absl::Status status = next.write(*store_);
    if (!status.ok()) {
      LOG(ERROR) << next.what << " is not kept on disk: " << status;
      status = absl::Status(status.code(),
                            absl::StrCat(next.what, " is not kept on disk: ", status.message()));
    }
    lock.lock();
    ++done_;
    if (!status.ok()) {
      failures_.emplace(done_, std::move(status));
      if (failures_.size() > kKeptFailures) failures_.erase(failures_.begin());
    }
    changed_.notify_all();
  }
}

}  // namespace loom::daemon
