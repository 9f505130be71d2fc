#ifndef LOOM_DAEMON_DAEMON_H_
#define LOOM_DAEMON_DAEMON_H_

// One loomd as a whole: Daemon::Start builds the gRPC server and what stands behind it (on the
// coordinator the Cluster, the JobManager and their services; on a worker the forwarding services
// and the WorkerSession; on both the NodeAgent, the metrics and the --data-dir lock), and Shutdown
// takes it down in order (within its grace plus a bound, even when a job's part does not end).
// Also CheckPlaintextListen, the refusal to serve plaintext beyond loopback without --insecure.
// main.cc runs one; the daemon tests start one in their process.

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/file_roots.h"
#include "daemon/cluster.h"
#include "daemon/cluster_service.h"
#include "daemon/coordinator_forwarding.h"
#include "daemon/daemon_options.h"
#include "daemon/directory_lock.h"
#include "daemon/job_manager.h"
#include "daemon/job_service.h"
#include "daemon/job_store.h"
#include "daemon/metrics.h"
#include "daemon/metrics_server.h"
#include "daemon/node_agent.h"
#include "daemon/node_service.h"
#include "daemon/scrape_gauges.h"
#include "daemon/worker_session.h"
#include "grpcpp/server.h"
#include "kernels/kernel_registry.h"

namespace loom::daemon {

// OK when the gRPC server may listen on options.listen_address: with --tls-*, on a loopback
// address (127.0.0.0/8, ::1, localhost), or with --insecure. FAILED_PRECONDITION naming the
// address and the flags otherwise.
absl::Status CheckPlaintextListen(const DaemonOptions& options);

// One loomd. The coordinator (no --coordinator): the gRPC server (loom.v1 JobService,
// ClusterService and NodeService for the workers' sessions, grpc.health.v1.Health, server
// reflection) over the cluster of nodes that joined it and the job manager; its own node is node 0
// and runs its part of jobs through a NodeAgent like every worker. A worker: the same server
// with JobService and ListNodes forwarded to the coordinator (coordinator_forwarding.h), a session
// with the coordinator, and the NodeAgent.
//
//   absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
//   ... (*daemon)->port() ...
//   (*daemon)->Shutdown(absl::Seconds(20));
class Daemon {
 public:
  // Registers the kernels of every device type this build has (RegisterAllKernels), starts the
  // job worker and serves on options.listen_address.
  // UNAVAILABLE when the address cannot be bound; FAILED_PRECONDITION from CheckPlaintextListen.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const DaemonOptions& options);
  // Shutdown(zero grace) when it was not called.
  ~Daemon();

  // Graceful: health turns NOT_SERVING, new jobs are refused, pending jobs are cancelled, the
  // running job gets `grace` to finish (then it is cancelled), watchers see the jobs end, then the
  // server stops. Idempotent. The node's agent gets kAgentStopBound to end after that: a job's
  // part that does not end (a kernel that never returns) is abandoned (abandoned_threads()).
  void Shutdown(absl::Duration grace);
  // How long Shutdown waits for this node's agent once the jobs were told to end.
  static constexpr absl::Duration kAgentStopBound = absl::Seconds(5);
  // Whether Shutdown left threads of a job's part running (its agent is leaked, still in use):
  // the process should then exit without destroying the daemon (std::_Exit).
  bool abandoned_threads() const { return abandoned_agent_ != nullptr; }
  // This node's health: OK, or why it is unhealthy (NodeAgent::health); the server's overall
  // health status is NOT_SERVING meanwhile.
  absl::Status node_health() const;

  // The port the server listens on (the one picked for port 0).
  int port() const { return port_; }
  // HOST:PORT with that port.
  const std::string& address() const { return address_; }
  // Each device's memory budget and how it was chosen (ResolveMemoryBudget).
  const MemoryBudget& memory_budget() const { return memory_budget_; }
  // The host memory budget for offloaded activations (ResolveHostMemoryBudget).
  const MemoryBudget& host_memory_budget() const { return host_memory_budget_; }
  // The coordinator's (null on workers).
  JobManager* jobs() { return manager_.get(); }
  Cluster* cluster() { return cluster_.get(); }
  // Workers: the session with the coordinator (null on the coordinator).
  const WorkerSession* session() const { return session_.get(); }
  // HOST:PORT of the plaintext health server (--health-listen, with the port picked for port 0);
  // empty without one.
  const std::string& health_address() const { return health_address_; }
  // HOST:PORT of /metrics (with the port picked for port 0); empty without --metrics-listen.
  std::string metrics_address() const {
    return metrics_server_ == nullptr ? "" : metrics_server_->address();
  }
  // "https://HOST:PORT/metrics" (with --tls-*) or "http://..."; empty without --metrics-listen.
  std::string metrics_url() const {
    return metrics_server_ == nullptr ? "" : metrics_server_->url();
  }

 private:
  Daemon() = default;
  // The gauges read at scrape time: nodes and jobs by state (coordinator), the session (worker).
  void AddScrapeGauges();
  // Serves grpc.health.v1.Health alone, in plaintext, on options.health_listen_address.
  absl::Status StartHealthServer(const std::string& address);
  // The health status of both servers: overall, and the coordinator's services.
  void SetServing(bool serving);
  // The agent's health changed: the servers' overall status (NOT_SERVING while unhealthy).
  void OnAgentHealth(const absl::Status& health);
  // Under health_mutex_: sets the statuses from serving_ and agent_healthy_.
  void ApplyHealthLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(health_mutex_);

  DaemonOptions options_;
  KernelRegistry kernels_;
  // With --data-dir: held for the daemon's life; the store outlives the manager.
  std::optional<DirectoryLock> data_directory_lock_;
  std::optional<JobStore> store_;
  // Where jobs may read files (--data-root), write checkpoints (--checkpoint-root), and both
  // (what a node's kernels open: data and initial states); set at Start, outlive the agent and
  // the manager.
  std::optional<FileRoots> data_roots_;
  std::optional<FileRoots> checkpoint_roots_;
  std::optional<FileRoots> job_files_;
  // Before everything that reports to it (the agent's jobs, the manager), so it outlives them.
  std::shared_ptr<DaemonMetrics> metrics_;
  std::shared_ptr<ScrapeGauges> scrape_gauges_;
  std::unique_ptr<MetricsServer> metrics_server_;
  std::unique_ptr<NodeAgent> agent_;
  // Shutdown's agent when it did not end within kAgentStopBound: leaked on purpose (its threads
  // still use it).
  NodeAgent* abandoned_agent_ = nullptr;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<JobManager> manager_;
  std::unique_ptr<WorkerSession> session_;
  std::unique_ptr<JobServiceImpl> job_service_;
  // Workers: JobService forwarding every call to the coordinator.
  std::unique_ptr<WorkerJobServiceImpl> worker_job_service_;
  // The coordinator's ClusterServiceImpl, or a worker's forwarding WorkerClusterServiceImpl.
  std::unique_ptr<v1::ClusterService::Service> cluster_service_;
  std::unique_ptr<NodeServiceImpl> node_service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  // --health-listen: the health service alone, without TLS.
  std::unique_ptr<grpc::Server> health_server_;
  std::string health_address_;
  std::string address_;
  MemoryBudget memory_budget_;
  MemoryBudget host_memory_budget_;
  bool shut_down_ = false;
  absl::Mutex health_mutex_;
  bool serving_ ABSL_GUARDED_BY(health_mutex_) = false;
  bool agent_healthy_ ABSL_GUARDED_BY(health_mutex_) = true;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_DAEMON_H_
