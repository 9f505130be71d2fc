#include "tests/runtime/in_memory_network.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace loom::testing {

class InMemoryNetwork::NodeNetwork final : public Network {
 public:
  NodeNetwork(InMemoryNetwork* network, int node) : network_(network), node_(node) {}

  int node() const override { return node_; }
  absl::string_view transport() const override { return "in_memory"; }
  absl::Status SendMessage(const ActorMessage& message) override {
    return network_->SendMessage(message);
  }
  absl::Status SendData(int destination, Tag tag, const void* buffer, size_t size,
                        Completion done) override {
    return network_->SendData(node_, destination, tag, buffer, size, std::move(done));
  }
  absl::Status ReceiveData(Tag tag, void* buffer, size_t size, Completion done) override {
    return network_->ReceiveData(node_, tag, buffer, size, std::move(done));
  }
  // Transfers complete on the sending or receiving thread; there is nothing to drive.
  bool DriveUntil(absl::FunctionRef<bool()> done,
                  std::chrono::steady_clock::time_point deadline) override {
    return false;
  }
  // Counted, so that tests see who wakes a driver (a TransportNetwork's would be asleep).
  void WakeDriver() override { network_->driver_wakes_.fetch_add(1); }

 private:
  InMemoryNetwork* const network_;
  const int node_;
};

InMemoryNetwork::InMemoryNetwork(int num_nodes)
    : num_nodes_(num_nodes),
      sends_(num_nodes),
      receives_(num_nodes),
      node_failure_(num_nodes),
      receivers_(num_nodes) {
  for (int node = 0; node < num_nodes; ++node) {
    nodes_.push_back(std::make_unique<NodeNetwork>(this, node));
  }
  thread_ = std::thread([this] { Loop(); });
}

InMemoryNetwork::~InMemoryNetwork() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int node = 0; node < num_nodes_; ++node) {
      for (auto& [tag, send] : sends_[node]) {
        CompleteLocked(std::move(send.done), absl::CancelledError("the network stopped"));
      }
      for (auto& [tag, receive] : receives_[node]) {
        CompleteLocked(std::move(receive.done), absl::CancelledError("the network stopped"));
      }
      sends_[node].clear();
      receives_[node].clear();
    }
    stopping_ = true;
    changed_.notify_all();
  }
  thread_.join();
}

Network* InMemoryNetwork::node(int index) { return nodes_[index].get(); }

void InMemoryNetwork::PushLocked(Work work) {
  work_.push_back(std::move(work));
  changed_.notify_all();
}

void InMemoryNetwork::CompleteLocked(Network::Completion done, absl::Status status) {
  PushLocked([done = std::move(done), status = std::move(status)]() mutable { done(status); });
}

void InMemoryNetwork::MatchLocked(PendingSend send, PendingReceive receive) {
  ++transfers_;
  PushLocked([send = std::move(send), receive = std::move(receive)]() mutable {
    if (send.size != receive.size) {
      receive.done(absl::DataLossError(
          absl::StrCat("a transfer of ", send.size, " bytes into a receive of ", receive.size)));
      send.done(absl::OkStatus());
      return;
    }
    if (send.size > 0) std::memcpy(receive.buffer, send.buffer, send.size);
    receive.done(absl::OkStatus());
    send.done(absl::OkStatus());
  });
}

void InMemoryNetwork::SetMessageReceiver(int node, MessageReceiver receiver) {
  std::lock_guard<std::mutex> lock(mutex_);
  receivers_[node] = std::move(receiver);
}

absl::Status InMemoryNetwork::SendMessage(const ActorMessage& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return absl::CancelledError("the network stopped");
  const int destination = message.destination.node();
  if (destination < 0 || destination >= num_nodes_ || !receivers_[destination]) {
    return absl::InvalidArgumentError(absl::StrCat("no message receiver on node ", destination));
  }
  PushLocked([receiver = receivers_[destination], message] { receiver(message); });
  return absl::OkStatus();
}

absl::Status InMemoryNetwork::SendData(int source, int destination, Network::Tag tag,
                                       const void* buffer, size_t size, Network::Completion done) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return absl::CancelledError("the network stopped");
  if (destination < 0 || destination >= num_nodes_) {
    return absl::InvalidArgumentError(absl::StrCat("no node ", destination));
  }
  if (buffer_check_) {
    if (absl::Status status = buffer_check_(buffer); !status.ok()) return status;
  }
  for (int node : {source, destination}) {
    if (!node_failure_[node].ok()) {
      CompleteLocked(std::move(done), node_failure_[node]);
      return absl::OkStatus();
    }
  }
  auto receive = receives_[destination].find(tag);
  if (receive != receives_[destination].end()) {
    PendingReceive matched = std::move(receive->second);
    receives_[destination].erase(receive);
    MatchLocked(PendingSend{source, buffer, size, std::move(done)}, std::move(matched));
    return absl::OkStatus();
  }
  if (!sends_[destination]
           .emplace(tag, PendingSend{source, buffer, size, std::move(done)})
           .second) {
    return absl::AlreadyExistsError(
        absl::StrCat("a send with tag ", tag, " to node ", destination, " is already pending"));
  }
  return absl::OkStatus();
}

absl::Status InMemoryNetwork::ReceiveData(int node, Network::Tag tag, void* buffer, size_t size,
                                          Network::Completion done) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return absl::CancelledError("the network stopped");
  if (buffer_check_) {
    if (absl::Status status = buffer_check_(buffer); !status.ok()) return status;
  }
  if (!node_failure_[node].ok()) {
    CompleteLocked(std::move(done), node_failure_[node]);
    return absl::OkStatus();
  }
  auto send = sends_[node].find(tag);
  if (send != sends_[node].end()) {
    PendingSend matched = std::move(send->second);
    sends_[node].erase(send);
    MatchLocked(std::move(matched), PendingReceive{buffer, size, std::move(done)});
    return absl::OkStatus();
  }
  if (!receives_[node].emplace(tag, PendingReceive{buffer, size, std::move(done)}).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("a receive with tag ", tag, " on node ", node, " is already pending"));
  }
  return absl::OkStatus();
}

void InMemoryNetwork::FailNode(int failed, absl::Status status) {
  std::lock_guard<std::mutex> lock(mutex_);
  node_failure_[failed] = status;
  for (int node = 0; node < num_nodes_; ++node) {
    for (auto it = sends_[node].begin(); it != sends_[node].end();) {
      if (node == failed || it->second.source == failed) {
        CompleteLocked(std::move(it->second.done), status);
        sends_[node].erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (auto& [tag, receive] : receives_[failed]) CompleteLocked(std::move(receive.done), status);
  receives_[failed].clear();
}

void InMemoryNetwork::SetBufferCheck(BufferCheck check) {
  std::lock_guard<std::mutex> lock(mutex_);
  buffer_check_ = std::move(check);
}

int64_t InMemoryNetwork::transfers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return transfers_;
}

void InMemoryNetwork::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return !work_.empty() || stopping_; });
    if (work_.empty()) return;
    Work work = std::move(work_.front());
    work_.pop_front();
    lock.unlock();
    work();
    work = nullptr;  // drop what the completion held before taking the lock again
    lock.lock();
  }
}

}  // namespace loom::testing
