#include "daemon/worker_session.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "grpcpp/create_channel.h"
#include "rpc/grpc_durations.h"

namespace loom::daemon {

WorkerSession::WorkerSession(Options options)
    : options_(std::move(options)), message_limit_(options_.max_message_bytes) {}

WorkerSession::~WorkerSession() { Stop(); }

void WorkerSession::Start(NodeAgent* agent) {
  agent_ = agent;
  thread_ = std::thread([this] { Loop(); });
}

void WorkerSession::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    if (context_ != nullptr) context_->TryCancel();
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::Status WorkerSession::Report(const v1::NodeJobUpdate& update) {
  v1::WorkerMessage message;
  *message.mutable_job() = update;
  const size_t bytes = message.ByteSizeLong();
  if (absl::Status fits = CheckUpdateFits(update.job_id(), bytes, message_limit_.load());
      !fits.ok()) {
    return fits;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  // Room for it, unless nothing else is queued (a larger update goes alone).
  changed_.wait(lock, [&] {
    return queued_bytes_ == 0 || queued_bytes_ + bytes <= options_.max_queued_update_bytes ||
           stream_ == nullptr || stopping_;
  });
  if (stream_ == nullptr || stopping_) {
    LOG(WARNING) << "could not report on job " << update.job_id() << ": no coordinator session";
    return absl::UnavailableError(
        absl::StrCat("could not report on job ", update.job_id(), ": no coordinator session"));
  }
  queue_.emplace_back(std::move(message), bytes);
  queued_bytes_ += bytes;
  changed_.notify_all();
  return absl::OkStatus();
}

void WorkerSession::WriteLoop(Stream* stream, absl::Duration interval) {
  v1::WorkerMessage beat;
  beat.mutable_heartbeat();
  absl::Time next_beat = absl::Now();
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_ && stream_ != nullptr) {
    const absl::Time now = absl::Now();
    if (queue_.empty() && now < next_beat) {
      changed_.wait_for(lock, absl::ToChronoNanoseconds(next_beat - now));
      continue;
    }
    bool written;
    if (now >= next_beat) {
      next_beat = now + interval;
      lock.unlock();
      // Every heartbeat says whether this node is healthy: the coordinator places no job on a
      // node whose part of an earlier job does not end.
      const absl::Status health = agent_ == nullptr ? absl::OkStatus() : agent_->health();
      beat.mutable_heartbeat()->set_unhealthy(std::string(health.message()));
      written = stream->Write(beat);
      lock.lock();
    } else {
      std::pair<v1::WorkerMessage, size_t> update = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      written = stream->Write(update.first);
      lock.lock();
      queued_bytes_ -= update.second;
      changed_.notify_all();
    }
    if (!written) break;
  }
  writer_running_ = false;
  changed_.notify_all();
}

void WorkerSession::Loop() {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(options_.max_message_bytes);
  arguments.SetMaxSendMessageSize(options_.max_message_bytes);
  // Reconnect every retry interval however long the coordinator was away (gRPC's default backoff
  // grows to two minutes, which would keep a restarted coordinator without its workers).
  const int retry_milliseconds = GrpcMilliseconds(options_.retry_interval);
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, retry_milliseconds);
  arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, retry_milliseconds);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, retry_milliseconds);
  // Heartbeats alone would not notice a coordinator that vanished without closing the connection
  // (TCP retransmits for many minutes) or that stopped answering: a keepalive ping left unanswered
  // for the timeout closes the connection, so the session ends. The coordinator's server accepts
  // pings at any rate (Daemon::Start).
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, GrpcMilliseconds(options_.keepalive_interval));
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, GrpcMilliseconds(options_.keepalive_timeout));
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      options_.coordinator_address, MakeChannelCredentials(options_.tls), arguments);
  std::unique_ptr<v1::NodeService::Stub> stub = v1::NodeService::NewStub(channel);
  bool first = true;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!first) {
        changed_.wait_for(lock, absl::ToChronoNanoseconds(options_.retry_interval),
                          [this] { return stopping_; });
      }
      if (stopping_) return;
    }
    first = false;
    RunSession(stub.get());
  }
}

void WorkerSession::RunSession(v1::NodeService::Stub* stub) {
  grpc::ClientContext context;
  context.set_wait_for_ready(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    // Published before the call starts: Stop cancels it (a cancel before the call exists cancels
    // it as it starts).
    context_ = &context;
  }
  // Not under mutex_: with wait_for_ready, the call's start waits for the coordinator for as long
  // as it is away, and Stop must be able to take the lock to cancel it.
  std::unique_ptr<Stream> stream = stub->Session(&context);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stream_ = stream.get();
  }
  v1::WorkerMessage hello;
  *hello.mutable_register_() = options_.node;
  hello.mutable_register_()->set_max_message_bytes(options_.max_message_bytes);
  v1::CoordinatorMessage message;
  std::thread writer;
  bool registered = false;
  // Nothing else writes before the writer starts (updates queued meanwhile go after the hello).
  if (stream->Write(hello) && stream->Read(&message) && message.has_registered()) {
    registered = true;
    index_ = message.registered().index();
    const int64_t coordinator_limit = message.registered().max_message_bytes();
    message_limit_ = coordinator_limit > 0
                         ? std::min<int64_t>(coordinator_limit, options_.max_message_bytes)
                         : options_.max_message_bytes;
    connected_ = true;
    const absl::Duration interval = absl::Milliseconds(
        std::max<int64_t>(message.registered().heartbeat_interval_milliseconds(), 10));
    LOG(INFO) << "joined the cluster of " << options_.coordinator_address << " as node "
              << index_.load();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      writer_running_ = true;
    }
    writer = std::thread([this, stream = stream.get(), interval] { WriteLoop(stream, interval); });
    while (stream->Read(&message)) {
      if (message.has_command()) agent_->Handle(message.command());
    }
  }
  size_t dropped = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stream_ = nullptr;
    // The writer may be writing one it took: it counts that one off itself.
    dropped = queue_.size();
    for (const auto& [update, bytes] : queue_) queued_bytes_ -= bytes;
    queue_.clear();
  }
  changed_.notify_all();
  {
    // A write the coordinator's end left waiting for flow control (it no longer reads) returns
    // only once the call is cancelled; cancelling at once would hide the coordinator's status.
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, std::chrono::seconds(1), [this] { return !writer_running_; })) {
      context.TryCancel();
    }
  }
  if (writer.joinable()) writer.join();
  if (dropped > 0) {
    LOG(WARNING) << "the session ended with " << dropped
                 << " updates unsent (their job is aborted)";
  }
  connected_ = false;
  grpc::Status status = stream->Finish();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    context_ = nullptr;
  }
  if (registered) {
    LOG(WARNING) << "lost the session with the coordinator " << options_.coordinator_address << " ("
                 << status.error_message() << "); aborting this node's job and "
                 << "reconnecting";
    agent_->AbortAll(absl::StrCat("node ", index_.load(), " lost its coordinator"));
  } else if (!status.ok()) {
    LOG(WARNING) << "the coordinator " << options_.coordinator_address
                 << " refused this node: " << status.error_message();
  }
}

}  // namespace loom::daemon
