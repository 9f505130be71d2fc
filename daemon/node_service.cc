#include "daemon/node_service.h"

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "rpc/grpc_status.h"
#include "rpc/tls.h"

namespace loom::daemon {
namespace {

// Serialises writes to a session stream, refuses them once the handler has returned, and cancels
// the call on request until then.
class SessionWriter {
 public:
  SessionWriter(grpc::ServerContext* context,
                grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream)
      : context_(context), stream_(stream) {}

  bool Write(const v1::CoordinatorMessage& message) {
    std::lock_guard<std::mutex> lock(write_mutex_);
    return stream_ != nullptr && stream_->Write(message);
  }
  // Ends the call: a Write waiting for a worker that reads nothing returns false (its own lock,
  // since that Write holds write_mutex_).
  void Cancel() {
    std::lock_guard<std::mutex> lock(context_mutex_);
    if (context_ != nullptr) context_->TryCancel();
  }
  void Close() {
    {
      std::lock_guard<std::mutex> lock(context_mutex_);
      context_ = nullptr;
    }
    std::lock_guard<std::mutex> lock(write_mutex_);
    stream_ = nullptr;
  }

 private:
  std::mutex context_mutex_;
  grpc::ServerContext* context_;
  std::mutex write_mutex_;
  grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream_;
};

}  // namespace

grpc::Status NodeServiceImpl::Session(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) {
  // Only a node certificate may join (any caller over plaintext).
  const Caller caller = CallerOf(*context);
  if (absl::Status role = RequireRole(caller, {Role::kNode}, "register as a node");
      !role.ok()) {
    LOG(WARNING) << "refused a node session from " << context->peer() << ": " << role.message();
    return ToGrpcStatus(role);
  }
  auto writer = std::make_shared<SessionWriter>(context, stream);
  v1::WorkerMessage message;
  // A worker registers as soon as it connects: a session silent for the node timeout is cancelled
  // (it would hold this thread for as long as its client keeps it open).
  const int64_t unregistered = cluster_->AddUnregisteredSession([writer] { writer->Cancel(); });
  const bool read = stream->Read(&message);
  cluster_->RemoveUnregisteredSession(unregistered);
  // A session without a first message that parses (bytes that are no WorkerMessage, or nothing)
  // is refused like one that starts with anything but RegisterNode.
  if (!read || !message.has_register_()) {
    writer->Close();
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "a node session starts with RegisterNode");
  }
  absl::StatusOr<Cluster::Registration> registration = cluster_->Register(
      message.register_(),
      [writer](const v1::NodeCommand& command) {
        v1::CoordinatorMessage out;
        *out.mutable_command() = command;
        return writer->Write(out);
      },
      [writer] { writer->Cancel(); },
      caller.authenticated ? std::optional<std::string>(caller.identity) : std::nullopt);
  if (!registration.ok()) {
    LOG(WARNING) << "refused a node from " << context->peer() << ": " << registration.status();
    return ToGrpcStatus(registration.status());
  }
  v1::CoordinatorMessage registered;
  registered.mutable_registered()->set_index(registration->index);
  registered.mutable_registered()->set_heartbeat_interval_milliseconds(
      absl::ToInt64Milliseconds(cluster_->options().heartbeat_interval));
  registered.mutable_registered()->set_max_message_bytes(cluster_->options().max_message_bytes);
  writer->Write(registered);
  while (stream->Read(&message)) {
    cluster_->Heartbeat(registration->index, registration->generation,
                        message.has_heartbeat() ? &message.heartbeat() : nullptr);
    if (message.has_job()) jobs_->OnNodeUpdate(registration->index, message.job());
  }
  writer->Close();
  cluster_->Disconnected(
      registration->index, registration->generation,
      absl::UnavailableError(context->IsCancelled() ? "cancelled" : "the worker closed it"));
  return grpc::Status::OK;
}

}  // namespace loom::daemon
