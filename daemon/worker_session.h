#ifndef LOOM_DAEMON_WORKER_SESSION_H_
#define LOOM_DAEMON_WORKER_SESSION_H_

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "client/tls.h"
#include "daemon/node_agent.h"
#include "grpcpp/client_context.h"
#include "proto/loom/v1/node_service.grpc.pb.h"

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
    // Mutual TLS to the coordinator (client/tls.h); nullopt: plaintext.
    std::optional<TlsCredentials> tls;
  };

  explicit WorkerSession(Options options);
  ~WorkerSession();

  // Starts the session thread; commands go to `agent` (which must outlive the session).
  void Start(NodeAgent* agent);
  void Stop();
  // Sends an update of the agent (any thread); dropped while there is no session.
  void Report(const v1::NodeJobUpdate& update);
  // The index the coordinator gave this node (-1 until registered).
  int index() const { return index_.load(); }
  // Whether a session is established now.
  bool connected() const { return connected_.load(); }

 private:
  using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;
  void Loop();
  // One session, until it breaks.
  void RunSession(v1::NodeService::Stub* stub);
  bool Write(const v1::WorkerMessage& message);

  const Options options_;
  NodeAgent* agent_ = nullptr;
  std::atomic<int> index_{-1};
  std::atomic<bool> connected_{false};

  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;                   // guarded by mutex_
  grpc::ClientContext* context_ = nullptr;  // guarded by mutex_: the live session's
  Stream* stream_ = nullptr;                // guarded by mutex_ (writes happen under it)
  std::thread thread_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_WORKER_SESSION_H_
