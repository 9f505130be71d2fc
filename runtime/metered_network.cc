#include "runtime/metered_network.h"

#include <utility>

namespace loom {

Network::Completion MeteredNetwork::Counting(TransferDirection direction, size_t size,
                                             Completion done) const {
  // The completion may run after this object is gone (a transfer in flight at the end of a job):
  // it holds the metrics and the transport's name, never `this`.
  return [metrics = metrics_, transport = std::string(network_->transport()), direction, size,
          done = std::move(done)](absl::Status status) mutable {
    if (status.ok()) metrics->AddTransferredBytes(transport, direction, static_cast<int64_t>(size));
    done(std::move(status));
  };
}

absl::Status MeteredNetwork::SendData(int destination, Tag tag, const void* buffer, size_t size,
                                      Completion done) {
  return network_->SendData(destination, tag, buffer, size,
                            Counting(TransferDirection::kSent, size, std::move(done)));
}

absl::Status MeteredNetwork::ReceiveData(Tag tag, void* buffer, size_t size, Completion done) {
  return network_->ReceiveData(tag, buffer, size,
                               Counting(TransferDirection::kReceived, size, std::move(done)));
}

}  // namespace loom
