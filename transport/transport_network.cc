#include "transport/transport_network.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace loom::transport {
namespace {

void PutLittleEndian(uint64_t value, int bytes, char* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xFF);
}

uint64_t GetLittleEndian(const char* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<unsigned char>(in[i])) << (8 * i);
  }
  return value;
}

// Record layout: type (1) | 3 zero bytes | slot (4) | register index (4) | 4 zero bytes |
// piece (8) | source (8) | destination (8).
constexpr int kTypeOffset = 0;
constexpr int kSlotOffset = 4;
constexpr int kRegisterOffset = 8;
constexpr int kPieceOffset = 16;
constexpr int kSourceOffset = 24;
constexpr int kDestinationOffset = 32;

}  // namespace

std::string TransportNetwork::Encode(const ActorMessage& message) {
  std::string bytes(kWireMessageBytes, '\0');
  PutLittleEndian(static_cast<uint8_t>(message.type), 1, &bytes[kTypeOffset]);
  PutLittleEndian(static_cast<uint32_t>(message.slot), 4, &bytes[kSlotOffset]);
  PutLittleEndian(message.register_index, 4, &bytes[kRegisterOffset]);
  PutLittleEndian(static_cast<uint64_t>(message.piece), 8, &bytes[kPieceOffset]);
  PutLittleEndian(message.source.value(), 8, &bytes[kSourceOffset]);
  PutLittleEndian(message.destination.value(), 8, &bytes[kDestinationOffset]);
  return bytes;
}

absl::StatusOr<ActorMessage> TransportNetwork::Decode(absl::string_view bytes) {
  if (bytes.size() != kWireMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat("an actor message of ", bytes.size(),
                                                   " bytes (expected ", kWireMessageBytes, ")"));
  }
  const char* data = bytes.data();
  uint64_t type = GetLittleEndian(data + kTypeOffset, 1);
  if (type > static_cast<uint64_t>(MessageType::kTransferDone) ||
      !IsNetworkMessageType(static_cast<MessageType>(type))) {
    return absl::InvalidArgumentError(
        absl::StrCat("an actor message of a type that does not cross nodes (", type, ")"));
  }
  ActorMessage message;
  message.type = static_cast<MessageType>(type);
  message.slot = static_cast<int32_t>(GetLittleEndian(data + kSlotOffset, 4));
  message.register_index = static_cast<uint32_t>(GetLittleEndian(data + kRegisterOffset, 4));
  message.piece = static_cast<int64_t>(GetLittleEndian(data + kPieceOffset, 8));
  message.source = ActorId::FromValue(GetLittleEndian(data + kSourceOffset, 8));
  message.destination = ActorId::FromValue(GetLittleEndian(data + kDestinationOffset, 8));
  return message;
}

absl::StatusOr<std::unique_ptr<TransportNetwork>> TransportNetwork::Create(
    int node, UcxContextOptions context, absl::Duration stop_grace) {
  std::unique_ptr<TransportNetwork> network(new TransportNetwork(node, stop_grace));
  TransportOptions options;
  options.self = static_cast<PeerId>(node);
  options.context = std::move(context);
  TransportNetwork* self = network.get();
  options.on_message = [self](PeerId from, absl::string_view bytes) {
    self->OnMessage(from, bytes);
  };
  options.on_peer_error = [self](PeerId peer, const absl::Status& status) {
    self->OnPeerError(peer, status);
  };
  absl::StatusOr<std::unique_ptr<Transport>> transport = Transport::Create(std::move(options));
  if (!transport.ok()) return transport.status();
  network->transport_ = *std::move(transport);
  absl::Status connected = network->transport_->AddPeer(options.self, network->address());
  if (!connected.ok()) return connected;
  return network;
}

TransportNetwork::~TransportNetwork() { Stop(); }

void TransportNetwork::Stop() {
  if (transport_ != nullptr) {
    WaitForProbedPeers();
    transport_->Stop();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  receiver_ = nullptr;
  on_error_ = nullptr;
}

void TransportNetwork::WaitForProbedPeers() {
  std::unique_lock<std::mutex> lock(mutex_);
  auto settled = [&] {
    for (int peer : probed_) {
      if (!HeardFromOrLost(peer)) return false;
    }
    return true;
  };
  if (!peers_changed_.wait_for(lock, absl::ToChronoNanoseconds(stop_grace_), settled)) {
    VLOG(1) << "node " << node_ << " stops without having heard from every peer it probed";
  }
  probed_.clear();  // a second Stop (the destructor's) has nothing to wait for
}

bool TransportNetwork::HeardFromOrLost(int peer) const {
  return probed_by_.contains(peer) || peer_failures_.contains(peer);
}

absl::Status TransportNetwork::Connect(int peer, absl::string_view address) {
  return transport_->AddPeer(static_cast<PeerId>(peer), address);
}

namespace {

// A collective's transfers are driven by the rank that posted them (Network::DriveUntil).
Transport::Queueing QueueingOf(Network::Tag tag) {
  return (tag & Network::kCollectiveTagBit) != 0 ? Transport::Queueing::kDeferred
                                                 : Transport::Queueing::kWake;
}

}  // namespace

void TransportNetwork::SetHandlers(MessageReceiver receiver, ErrorHandler on_error) {
  std::lock_guard<std::mutex> lock(mutex_);
  receiver_ = std::move(receiver);
  on_error_ = std::move(on_error);
}

void TransportNetwork::JobEnded() {
  std::lock_guard<std::mutex> lock(mutex_);
  on_error_ = nullptr;
}

absl::Status TransportNetwork::SendProbe(int peer) {
  absl::Status sent = transport_->Send(static_cast<PeerId>(peer), kProbeMessage);
  if (sent.ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    probed_.insert(peer);
  }
  return sent;
}

absl::StatusOr<std::map<int, absl::Status>> TransportNetwork::WaitForProbes(
    const std::vector<int>& peers, absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto settled = [&] {
    if (!probe_wait_interrupted_.ok()) return true;
    for (int peer : peers) {
      if (!HeardFromOrLost(peer)) return false;
    }
    return true;
  };
  peers_changed_.wait_for(lock, absl::ToChronoNanoseconds(timeout), settled);
  if (!probe_wait_interrupted_.ok()) return probe_wait_interrupted_;
  std::map<int, absl::Status> unreachable;
  for (int peer : peers) {
    if (probed_by_.contains(peer)) continue;
    auto failure = peer_failures_.find(peer);
    unreachable[peer] =
        failure != peer_failures_.end()
            ? failure->second
            : absl::DeadlineExceededError(absl::StrCat("no probe from node ", peer, " within ",
                                                       absl::FormatDuration(timeout)));
  }
  return unreachable;
}

void TransportNetwork::InterruptProbeWait(absl::Status reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (probe_wait_interrupted_.ok()) probe_wait_interrupted_ = std::move(reason);
  }
  peers_changed_.notify_all();
}

void TransportNetwork::OnMessage(PeerId from, absl::string_view bytes) {
  if (bytes == kProbeMessage) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      probed_by_.insert(static_cast<int>(from));
    }
    peers_changed_.notify_all();
    return;
  }
  absl::StatusOr<ActorMessage> message = Decode(bytes);
  if (message.ok() && message->source.node() != static_cast<int>(from)) {
    // The runtime trusts the sender's node in what it reports: it must be the peer's own.
    message = absl::InvalidArgumentError(
        absl::StrCat("an actor message claiming to come from node ", message->source.node()));
  } else if (message.ok() && message->destination.node() != node_) {
    message = absl::InvalidArgumentError(
        absl::StrCat("an actor message for node ", message->destination.node()));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!message.ok()) {
    absl::Status status = absl::DataLossError(
        absl::StrCat("node ", node_, ": node ", from, " sent ", message.status().message()));
    if (on_error_) {
      on_error_(status);
    } else {
      LOG(ERROR) << status;
    }
    return;
  }
  if (!receiver_) {
    LOG(ERROR) << "node " << node_ << ": dropped an actor message from node " << from
               << " that arrived before the job was ready for it";
    return;
  }
  receiver_(*message);
}

void TransportNetwork::OnPeerError(PeerId peer, const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    peer_failures_.emplace(static_cast<int>(peer), status);
    absl::Status lost(
        status.code(),
        status.code() == absl::StatusCode::kDataLoss
            ? absl::StrCat("node ", node_, " stopped listening to node ", peer,
                           ", which sent malformed data: ", status.message())
            : absl::StrCat("node ", node_, " lost its connection to node ", peer, ": ",
                           status.message()));
    if (on_error_) {
      LOG(WARNING) << lost;
      on_error_(lost);
    } else {
      // Before the job listens, WaitForProbes reports it; after its end, peers leave as they are
      // released.
      VLOG(1) << lost;
    }
  }
  peers_changed_.notify_all();
}

absl::Status TransportNetwork::SendMessage(const ActorMessage& message) {
  return transport_->Send(static_cast<PeerId>(message.destination.node()), Encode(message));
}

absl::Status TransportNetwork::SendData(int destination, Tag tag, const void* buffer, size_t size,
                                        Completion done) {
  return transport_->SendData(static_cast<PeerId>(destination), tag, buffer, size, std::move(done),
                              QueueingOf(tag));
}

absl::Status TransportNetwork::ReceiveData(Tag tag, void* buffer, size_t size, Completion done) {
  return transport_->ReceiveData(
      tag, buffer, size,
      [this, tag, size, done = std::move(done)](absl::StatusOr<size_t> received) mutable {
        if (!received.ok()) {
          done(received.status());
        } else if (*received != size) {
          done(
              absl::DataLossError(absl::StrCat("node ", node_, ": the transfer with tag ", tag,
                                               " brought ", *received, " bytes, expected ", size)));
        } else {
          done(absl::OkStatus());
        }
      },
      QueueingOf(tag));
}

bool TransportNetwork::DriveUntil(absl::FunctionRef<bool()> done,
                                  std::chrono::steady_clock::time_point deadline) {
  return transport_->DriveUntil(
      done, absl::Now() + absl::FromChrono(deadline - std::chrono::steady_clock::now()));
}

}  // namespace loom::transport
