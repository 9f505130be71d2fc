#ifndef LOOM_TRANSPORT_TRANSPORT_NETWORK_H_
#define LOOM_TRANSPORT_TRANSPORT_NETWORK_H_

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/message.h"
#include "runtime/network.h"
#include "transport/transport.h"

namespace loom::transport {

// The runtime's Network over UCX: one Transport per node per job. Actor messages travel as
// fixed-size active messages (an ActorMessage in a 40-byte little-endian record), register and
// collective data as tag messages.
//
//   auto network = TransportNetwork::Create(node, context_options);
//   publish (*network)->address() through the coordinator; for every other node:
//   (*network)->Connect(peer, peer_address);
//   (*network)->SetHandlers(deliver_to_job_runtime, fail_the_job);   // before any peer sends
//
// The node is also its own peer (collectives between ranks of one node use the same path).
class TransportNetwork final : public Network {
 public:
  // Called on the progress thread for every actor message received (must not block).
  using MessageReceiver = std::function<void(const ActorMessage& message)>;
  // Called on the progress thread when a peer is lost or sends something malformed; the status
  // names the peer.
  using ErrorHandler = std::function<void(const absl::Status& status)>;

  static absl::StatusOr<std::unique_ptr<TransportNetwork>> Create(int node,
                                                                  UcxContextOptions context = {});
  ~TransportNetwork() override;

  // The bytes other nodes pass to Connect.
  const std::string& address() const { return transport_->address(); }
  absl::Status Connect(int peer, absl::string_view address);
  // Until set, received messages are dropped with an error to the log; set before the job starts.
  void SetHandlers(MessageReceiver receiver, ErrorHandler on_error);

  // Network.
  int node() const override { return node_; }
  absl::string_view transport() const override { return "ucx"; }
  absl::Status SendMessage(const ActorMessage& message) override;
  absl::Status SendData(int destination, Tag tag, const void* buffer, size_t size,
                        Completion done) override;
  absl::Status ReceiveData(Tag tag, void* buffer, size_t size, Completion done) override;

  // Stops the transport: pending transfers complete with Cancelled; nothing is delivered after it
  // returns. Call before the JobRuntime that receives the messages is destroyed.
  void Stop();

  // Wire format of an actor message (exposed for tests).
  static constexpr size_t kWireMessageBytes = 40;
  static std::string Encode(const ActorMessage& message);
  static absl::StatusOr<ActorMessage> Decode(absl::string_view bytes);

 private:
  explicit TransportNetwork(int node) : node_(node) {}
  void OnMessage(PeerId from, absl::string_view bytes);
  void OnPeerError(PeerId peer, const absl::Status& status);

  const int node_;
  std::unique_ptr<Transport> transport_;
  std::mutex mutex_;
  MessageReceiver receiver_;  // guarded by mutex_
  ErrorHandler on_error_;     // guarded by mutex_
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_TRANSPORT_NETWORK_H_
