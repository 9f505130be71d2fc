#ifndef LOOM_RUNTIME_METERED_NETWORK_H_
#define LOOM_RUNTIME_METERED_NETWORK_H_

// MeteredNetwork: a Network that counts the bytes of completed transfers in RuntimeMetrics and
// forwards everything to the network it wraps. JobRuntime puts one in front of the job's network
// when the job has metrics.

#include <string>

#include "runtime/network.h"
#include "runtime/runtime_metrics.h"

namespace loom {

// A Network that counts the bytes of every completed transfer (RuntimeMetrics'
// AddTransferredBytes, by direction) and forwards everything to the network it wraps. JobRuntime
// puts one in front of JobOptions::network when the job has metrics, so that actors and collective
// backends are counted alike without knowing of it.
class MeteredNetwork final : public Network {
 public:
  // Neither is owned; both must outlive this object and every transfer started through it.
  MeteredNetwork(Network* network, RuntimeMetrics* metrics)
      : network_(network), metrics_(metrics) {}

  int node() const override { return network_->node(); }
  absl::string_view transport() const override { return network_->transport(); }
  absl::Status SendMessage(const ActorMessage& message) override {
    return network_->SendMessage(message);
  }
  absl::Status SendData(int destination, Tag tag, const void* buffer, size_t size,
                        Completion done) override;
  absl::Status ReceiveData(Tag tag, void* buffer, size_t size, Completion done) override;
  bool DriveUntil(absl::FunctionRef<bool()> done,
                  std::chrono::steady_clock::time_point deadline) override {
    return network_->DriveUntil(done, deadline);
  }
  void WakeDriver() override { network_->WakeDriver(); }

 private:
  Completion Counting(TransferDirection direction, size_t size, Completion done) const;

  Network* const network_;
  RuntimeMetrics* const metrics_;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_METERED_NETWORK_H_
