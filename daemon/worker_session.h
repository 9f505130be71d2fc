#ifndef LOOM_DAEMON_WORKER_SESSION_H_
#define LOOM_DAEMON_WORKER_SESSION_H_

// WorkerSession: a worker loomd's NodeService session with its coordinator. It registers the
// node, sends heartbeats (saying whether the NodeAgent is healthy) and the agent's updates (queued,
// within the message limit), hands the coordinator's commands to the agent, and when the session
// breaks aborts the running job and reconnects. Stop ends it at once, coordinator or not.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/node_agent.h"
#include "grpcpp/client_context.h"
#include "proto/loom/v1/node_service.grpc.pb.h"
#include "rpc/tls.h"

namespace loom::daemon {

// A worker's session with its coordinator: connects, registers, sends heartbeats, runs the
// coordinator's commands on the node's agent and sends back the agent's updates. When the session
// breaks (the coordinator died, restarted or lost this node), the running job is aborted and the
// session reconnects, every `retry_interval`, until Stop. A coordinator that stops answering
// keepalive pings counts as broken too.
class WorkerSession {
 public:
  struct Options {
    std::string coordinator_address;
    v1::RegisterNode node;
    absl::Duration retry_interval = absl::Seconds(1);
    // gRPC keepalive on the session: a ping every `keepalive_interval`, and a coordinator that
    // does not answer one within `keepalive_timeout` (a host gone without closing the connection,
    // a stopped or hung process) ends the session like a closed one.
    absl::Duration keepalive_interval = absl::Seconds(1);
    absl::Duration keepalive_timeout = absl::Seconds(5);
    int max_message_bytes = 64 << 20;
    // Report waits while the updates queued for the coordinator hold more than this.
    size_t max_queued_update_bytes = size_t{64} << 20;
    // Mutual TLS to the coordinator (rpc/tls.h); nullopt: plaintext.
    std::optional<TlsCredentials> tls;
  };

  explicit WorkerSession(Options options);
  ~WorkerSession();

  // Starts the session thread; commands go to `agent` (which must outlive the session).
  void Start(NodeAgent* agent);
  // Ends the session (cancels its call, also one still waiting for an absent coordinator) and
  // joins its threads: returns within moments whatever the coordinator does.
  void Stop();
  // Queues an update of the agent for the session's writer (any thread); the updates go out in the
  // order queued, heartbeats between them. Waits while the queued updates hold more than
  // options.max_queued_update_bytes (forwarded sink pieces of a job that streams its fetches: a
  // slow link slows the sinks instead of filling the memory). UNAVAILABLE (dropped) while there is
  // no session; RESOURCE_EXHAUSTED (dropped) for an update over message_limit(), which would end
  // the session.
  absl::Status Report(const v1::NodeJobUpdate& update);
  // The largest message of the session: the smaller of this node's and the coordinator's
  // --max-message-size (this node's until the coordinator said its own at registration).
  int64_t message_limit() const { return message_limit_.load(); }
  // The index the coordinator gave this node (-1 until registered).
  int index() const { return index_.load(); }
  // Whether a session is established now.
  bool connected() const { return connected_.load(); }

 private:
  using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;
  void Loop();
  // One session, until it breaks.
  void RunSession(v1::NodeService::Stub* stub);
  // The registered session's only writer: the queued updates, and a heartbeat every `interval`
  // (when one is due it goes before the next update, so a queue of large pieces does not hold it
  // back). Ends when a write fails, the session ends or Stop.
  void WriteLoop(Stream* stream, absl::Duration interval);

  const Options options_;
  NodeAgent* agent_ = nullptr;
  std::atomic<int> index_{-1};
  std::atomic<int64_t> message_limit_;
  std::atomic<bool> connected_{false};

  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;                   // guarded by mutex_
  grpc::ClientContext* context_ = nullptr;  // guarded by mutex_: the live session's
  Stream* stream_ = nullptr;                // guarded by mutex_: the live session's
  // Updates waiting for the writer, with their sizes (guarded by mutex_).
  std::deque<std::pair<v1::WorkerMessage, size_t>> queue_;
  size_t queued_bytes_ = 0;      // guarded by mutex_
  bool writer_running_ = false;  // guarded by mutex_: the session's WriteLoop has not ended
  std::thread thread_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_WORKER_SESSION_H_
