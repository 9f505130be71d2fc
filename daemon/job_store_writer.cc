#include "daemon/job_store_writer.h"

#include <pthread.h>

#include <utility>

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

void JobStoreWriter::Loop() {
  pthread_setname_np(pthread_self(), "job-store");
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything is written
    Queued next = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    if (absl::Status status = next.write(*store_); !status.ok()) {
      LOG(ERROR) << next.what << " is not kept on disk: " << status;
    }
    lock.lock();
    ++done_;
    changed_.notify_all();
  }
}

}  // namespace loom::daemon
