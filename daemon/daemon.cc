#include "daemon/daemon.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <chrono>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/device_name.h"
#include "daemon/host_port.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/cpu/blas_threads.h"
#include "node/device_backends.h"
#include "rpc/request_parse_errors.h"
#include "rpc/tls.h"

namespace loom::daemon {
namespace {

// How long watchers get to read the last events once every job has ended.
constexpr absl::Duration kWatchersDeadline = absl::Seconds(5);

// The GPUs of --devices cuda:I,J must exist here (cuda:all found them already).
absl::Status CheckDevicesExist(const cli::DeviceSpec& devices) {
  if (devices.type != plan::CUDA) return absl::OkStatus();
  absl::StatusOr<int> count = CudaDeviceCount();
  if (!count.ok()) {
    return absl::Status(count.status().code(), absl::StrCat("--devices ", devices.ToString(), ": ",
                                                            count.status().message()));
  }
  for (int index : devices.indices) {
    if (index >= *count) {
      return absl::FailedPreconditionError(
          absl::StrCat("--devices ", devices.ToString(), ": there is no cuda:", index,
                       " (this machine has ", *count, " GPU", *count == 1 ? "" : "s", ")"));
    }
  }
  return absl::OkStatus();
}

// Whether `host` (no port, no brackets) names this machine's loopback interface only.
bool IsLoopbackHost(const std::string& host) {
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  in_addr ipv4;
  if (inet_pton(AF_INET, host.c_str(), &ipv4) == 1) return (ntohl(ipv4.s_addr) >> 24) == 127;
  in6_addr ipv6;
  if (inet_pton(AF_INET6, host.c_str(), &ipv6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&ipv6)) return true;
    // ::ffff:127.x.x.x
    return IN6_IS_ADDR_V4MAPPED(&ipv6) && ipv6.s6_addr[12] == 127;
  }
  return false;  // 0.0.0.0, ::, a host name or an interface's address: reachable from outside
}

// A worker with TLS presents a certificate with the node role (the coordinator refuses others).
absl::Status CheckNodeCertificate(const DaemonOptions& options) {
  if (!options.tls.has_value() || options.coordinator_address.empty()) return absl::OkStatus();
  absl::StatusOr<Caller> self = CallerOfCertificate(options.tls->certificate);
  if (!self.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls-cert: ", self.status().message()));
  }
  if (!self->Has(Role::kNode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--tls-cert is ", self->Describe(),
        "'s certificate, without the node role (loom://role/node): the coordinator would refuse "
        "this worker (make one with scripts/make-certs --role node)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPlaintextListen(const DaemonOptions& options) {
  if (options.tls.has_value() || options.insecure) return absl::OkStatus();
  absl::string_view address = options.listen_address;
  // gRPC's address forms: "HOST:PORT", "[IPV6]:PORT", and "dns:", "ipv4:" or "ipv6:" prefixes.
  for (absl::string_view scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::ConsumePrefix(&address, scheme)) break;
  }
  std::string host;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    host = std::string(address.substr(1, close == absl::string_view::npos ? 0 : close - 1));
  } else {
    const size_t colon = address.rfind(':');
    host = std::string(address.substr(0, colon == absl::string_view::npos ? 0 : colon));
  }
  if (!host.empty() && IsLoopbackHost(host)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to serve gRPC in plaintext on '", options.listen_address,
      "', which is not a loopback address: anyone who reaches it could submit jobs, read their "
      "results and join as a node. Give --tls-ca, --tls-cert and --tls-key (mutual TLS), listen "
      "on 127.0.0.1, or pass --insecure to serve it in plaintext anyway"));
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& options) {
  if (absl::Status status = CheckPlaintextListen(options); !status.ok()) return status;
  if (absl::Status status = CheckNodeCertificate(options); !status.ok()) return status;
  std::unique_ptr<Daemon> daemon(new Daemon());
  Daemon* self = daemon.get();
  daemon->options_ = options;
  if (absl::Status status = CheckDevicesExist(options.devices); !status.ok()) return status;
  absl::StatusOr<MemoryBudget> budget = ResolveMemoryBudget(options, CudaDeviceMemory);
  if (!budget.ok()) return budget.status();
  daemon->memory_budget_ = *std::move(budget);
  absl::StatusOr<MemoryBudget> host_budget = ResolveHostMemoryBudget(options);
  if (!host_budget.ok()) return host_budget.status();
  daemon->host_memory_budget_ = *std::move(host_budget);
  if (absl::Status status = RegisterAllKernels(&daemon->kernels_); !status.ok()) return status;
  SetBlasThreads(options.blas_threads);
  WarnIfBlasKernelsAreGeneric();
  const bool coordinator = options.coordinator_address.empty();
  if (!options.data_directory.empty()) {
    absl::StatusOr<DirectoryLock> lock = DirectoryLock::Acquire(options.data_directory);
    if (!lock.ok()) return lock.status();
    daemon->data_directory_lock_.emplace(*std::move(lock));
    if (coordinator) {
      absl::StatusOr<JobStore> store = JobStore::Open(options.data_directory);
      if (!store.ok()) return store.status();
      daemon->store_.emplace(*std::move(store));
    }
  }
  {
    absl::StatusOr<FileRoots> data = FileRoots::Beneath(options.data_roots, "--data-root");
    if (!data.ok()) return data.status();
    absl::StatusOr<FileRoots> checkpoints =
        FileRoots::Beneath(options.checkpoint_roots, "--checkpoint-root");
    if (!checkpoints.ok()) return checkpoints.status();
    absl::StatusOr<FileRoots> both = FileRoots::Union(*data, *checkpoints);
    if (!both.ok()) return both.status();
    daemon->data_roots_.emplace(*std::move(data));
    daemon->checkpoint_roots_.emplace(*std::move(checkpoints));
    daemon->job_files_.emplace(*std::move(both));
  }
  daemon->metrics_ = std::make_shared<DaemonMetrics>();

  // This node's devices, as ListNodes shows them.
  std::vector<v1::DeviceInfo> devices;
  const char* type = options.devices.type == plan::CUDA ? "cuda" : "cpu";
  for (int index : options.devices.indices) {
    v1::DeviceInfo& device = devices.emplace_back();
    device.set_name(DeviceName(0, type, index));
    device.set_type(type);
    device.set_index(index);
    device.set_memory_budget_bytes(daemon->memory_budget_.bytes);
  }

  // The node's agent reports to the coordinator: in this process, or over the session.
  NodeAgentOptions agent_options;
  agent_options.metrics = daemon->metrics_.get();
  agent_options.files = &*daemon->job_files_;
  agent_options.checkpoint_roots = &*daemon->checkpoint_roots_;
  agent_options.release_timeout = options.release_timeout;
  agent_options.max_trace_events_per_job = options.max_trace_events_per_job;
  agent_options.health_changed = [self](const absl::Status& health) {
    self->OnAgentHealth(health);
  };
  daemon->agent_ = std::make_unique<NodeAgent>(
      &daemon->kernels_,
      [self, coordinator, limit = options.max_message_bytes](const v1::NodeJobUpdate& update) {
        if (!coordinator) return self->session_->Report(update);
        // In the process, but held by the coordinator as any node's: the same bound.
        if (absl::Status fits = CheckUpdateFits(update.job_id(), update.ByteSizeLong(), limit);
            !fits.ok()) {
          return fits;
        }
        self->manager_->OnNodeUpdate(0, update);
        return absl::OkStatus();
      },
      std::move(agent_options));
  if (coordinator) {
    v1::NodeInfo node;
    node.set_name(options.node_name);
    node.set_version(LOOM_VERSION);
    for (const v1::DeviceInfo& device : devices) *node.add_devices() = device;
    node.set_host_memory_budget_bytes(daemon->host_memory_budget_.bytes);
    Cluster::Options cluster_options;
    cluster_options.heartbeat_interval = options.heartbeat_interval;
    cluster_options.node_timeout = options.node_timeout;
    cluster_options.max_message_bytes = options.max_message_bytes;
    cluster_options.max_nodes = options.max_nodes;
    cluster_options.missing_node_expiry = options.missing_node_expiry;
    daemon->cluster_ = std::make_unique<Cluster>(cluster_options, std::move(node),
                                                 [self](const v1::NodeCommand& command) {
                                                   self->agent_->Handle(command);
                                                   return true;
                                                 });
    JobManager::Options manager_options;
    manager_options.stall_timeout = options.stall_timeout;
    manager_options.probe_timeout = options.peer_probe_timeout;
    manager_options.max_pending_jobs = options.max_pending_jobs;
    manager_options.max_plan_tasks = options.max_plan_tasks;
    manager_options.compile_threads = options.compile_threads;
    manager_options.max_finished_jobs = options.max_finished_jobs;
    manager_options.max_events_per_job = options.max_events_per_job;
    manager_options.max_fetched_bytes_per_job = options.max_fetched_bytes;
    manager_options.max_kept_trace_bytes = options.max_kept_trace_bytes;
    manager_options.metrics = daemon->metrics_.get();
    manager_options.checkpoint_roots = &*daemon->checkpoint_roots_;
    if (daemon->store_.has_value()) manager_options.store = &*daemon->store_;
    daemon->manager_ =
        std::make_unique<JobManager>(std::move(manager_options), daemon->cluster_.get());
    daemon->cluster_->set_lost_handler(
        [self](int node, const absl::Status& reason) { self->manager_->OnNodeLost(node, reason); });
    daemon->job_service_ = std::make_unique<JobServiceImpl>(
        daemon->manager_.get(), options.max_watches, options.max_message_bytes);
    daemon->node_service_ =
        std::make_unique<NodeServiceImpl>(daemon->cluster_.get(), daemon->manager_.get());
    daemon->cluster_service_ = std::make_unique<ClusterServiceImpl>(daemon->cluster_.get());
  } else {
    std::shared_ptr<grpc::Channel> coordinator =
        CoordinatorChannel(options.coordinator_address, options.tls, options.max_message_bytes,
                           options.heartbeat_interval, options.node_timeout);
    daemon->worker_job_service_ =
        std::make_unique<WorkerJobServiceImpl>(coordinator, options.coordinator_address);
    daemon->cluster_service_ =
        std::make_unique<WorkerClusterServiceImpl>(coordinator, options.coordinator_address);
  }

  // Both are process-wide settings of gRPC that take effect in the builders made after them.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen_address, MakeServerCredentials(options.tls), &port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // Workers ping the coordinator every --heartbeat-interval (WorkerSession) and clients every
  // 30 s (ClusterClientOptions), far more often than gRPC servers accept by default (pings
  // closer than 5 minutes without data count as strikes, and the third ends the connection with
  // GOAWAY "too many pings"). The workers' heartbeats, data, reset that count, but a watch of a
  // quiet job receives nothing for minutes: accept any rate (without this line
  // ClusterClientTest.AQuietWatchOutlastsItsKeepalivePings fails).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // gRPC sets SO_REUSEPORT by default, with which a second loomd on this port would start and
  // silently share it (clients then reach either): binding must fail instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (coordinator) {
    builder.RegisterService(daemon->job_service_.get());
    builder.RegisterService(daemon->node_service_.get());
  } else {
    builder.RegisterService(daemon->worker_job_service_.get());
  }
  builder.RegisterService(daemon->cluster_service_.get());
  // A request body that does not parse: INVALID_ARGUMENT naming the method and the request type
  // (gRPC's own answer is INTERNAL with an empty message).
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(MakeRequestParseErrorInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  daemon->server_ = builder.BuildAndStart();
  if (daemon->server_ == nullptr || port == 0) {
    daemon->manager_.reset();
    return absl::UnavailableError(absl::StrCat("cannot serve on '", options.listen_address,
                                               "': the address is in use or not local"));
  }
  daemon->port_ = port;
  daemon->address_ = WithPort(options.listen_address, port);
  daemon->SetServing(true);
  if (coordinator) {
    daemon->cluster_->SetSelfAddress(daemon->address_);
    daemon->cluster_->Start();
    daemon->manager_->Start();
    LOG(INFO) << "loomd node '" << options.node_name << "' (coordinator, node 0) serving on "
              << daemon->address_ << " with devices " << options.devices.ToString();
  } else {
    WorkerSession::Options session_options;
    session_options.coordinator_address = options.coordinator_address;
    session_options.max_message_bytes = options.max_message_bytes;
    session_options.keepalive_interval = options.heartbeat_interval;
    session_options.keepalive_timeout = options.node_timeout;
    session_options.tls = options.tls;
    v1::RegisterNode& node = session_options.node;
    node.set_name(options.node_name);
    node.set_rank(options.node_rank);
    node.set_address(daemon->address_);
    node.set_version(LOOM_VERSION);
    for (const v1::DeviceInfo& device : devices) *node.add_devices() = device;
    node.set_host_memory_budget_bytes(daemon->host_memory_budget_.bytes);
    daemon->session_ = std::make_unique<WorkerSession>(std::move(session_options));
    daemon->session_->Start(daemon->agent_.get());
    LOG(INFO) << "loomd node '" << options.node_name << "' (worker of "
              << options.coordinator_address << ") serving on " << daemon->address_ << " with "
              << "devices " << options.devices.ToString();
  }
  if (!options.metrics_listen_address.empty()) {
    daemon->scrape_gauges_ = std::make_shared<ScrapeGauges>();
    daemon->AddScrapeGauges();
    absl::StatusOr<std::unique_ptr<MetricsServer>> metrics = MetricsServer::Start(
        options.metrics_listen_address, {daemon->metrics_->registry(), daemon->scrape_gauges_},
        options.metrics_plaintext ? std::nullopt : options.tls);
    if (!metrics.ok()) {
      daemon->Shutdown(absl::ZeroDuration());
      return metrics.status();
    }
    daemon->metrics_server_ = std::move(*metrics);
    LOG(INFO) << "metrics on " << daemon->metrics_server_->url();
  }
  if (!options.health_listen_address.empty()) {
    if (absl::Status status = daemon->StartHealthServer(options.health_listen_address);
        !status.ok()) {
      daemon->Shutdown(absl::ZeroDuration());
      return status;
    }
    daemon->SetServing(true);
  }
  return daemon;
}

absl::Status Daemon::StartHealthServer(const std::string& address) {
  // Made after EnableDefaultHealthCheckService, so it has the default health service (and
  // reflection), and no other.
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // as the main server
  health_server_ = builder.BuildAndStart();
  if (health_server_ == nullptr || port == 0) {
    health_server_.reset();
    return absl::UnavailableError(absl::StrCat("cannot serve health checks on '", address,
                                               "' (--health-listen): the address is in use or "
                                               "not local"));
  }
  health_address_ = WithPort(address, port);
  LOG(INFO) << "health checks (grpc.health.v1, plaintext) on " << health_address_;
  return absl::OkStatus();
}

void Daemon::SetServing(bool serving) {
  absl::MutexLock lock(&health_mutex_);
  serving_ = serving;
  ApplyHealthLocked();
}

void Daemon::OnAgentHealth(const absl::Status& health) {
  {
    absl::MutexLock lock(&health_mutex_);
    agent_healthy_ = health.ok();
    ApplyHealthLocked();
  }
  if (cluster_ != nullptr) cluster_->SetNodeHealth(0, health);
}

void Daemon::ApplyHealthLocked() {
  for (grpc::Server* server : {server_.get(), health_server_.get()}) {
    grpc::HealthCheckServiceInterface* health =
        server == nullptr ? nullptr : server->GetHealthCheckService();
    if (health == nullptr) continue;
    // The node as a whole: NOT_SERVING also while its agent is stuck on a job's part that does
    // not end. The coordinator's services still take jobs for its other nodes meanwhile.
    health->SetServingStatus(serving_ && agent_healthy_);
    if (manager_ != nullptr) {
      health->SetServingStatus(v1::JobService::service_full_name(), serving_);
      health->SetServingStatus(v1::ClusterService::service_full_name(), serving_);
    }
  }
}

absl::Status Daemon::node_health() const {
  return agent_ == nullptr ? absl::OkStatus() : agent_->health();
}

void Daemon::AddScrapeGauges() {
  using Samples = std::vector<ScrapeGauges::Sample>;
  if (manager_ != nullptr) {
    scrape_gauges_->Add(
        "loom_cluster_nodes",
        "Nodes known to the coordinator, by state (ready, missing: no heartbeat for longer than "
        "--node-timeout, draining: shutting down, unhealthy: a job's part has not ended "
        "--release-timeout after it was told to stop).",
        [cluster = cluster_.get()] {
          std::map<std::string, double> count = {
              {"ready", 0}, {"missing", 0}, {"draining", 0}, {"unhealthy", 0}};
          for (const v1::NodeInfo& node : cluster->Nodes()) {
            count[absl::AsciiStrToLower(
                absl::StripPrefix(v1::NodeState_Name(node.state()), "NODE_STATE_"))] += 1;
          }
          Samples samples;
          for (const auto& [state, value] : count) samples.push_back({{{"state", state}}, value});
          return samples;
        });
    scrape_gauges_->Add(
        "loom_jobs",
        "Jobs the coordinator holds, by state (finished ones until --max-finished-jobs forgets "
        "them).",
        [manager = manager_.get()] {
          std::map<std::string, double> count;
          for (int state = v1::JobState_MIN; state <= v1::JobState_MAX; ++state) {
            if (v1::JobState_IsValid(state) && state != v1::JOB_STATE_UNSPECIFIED) {
              count[JobStateLabel(static_cast<v1::JobState>(state))] = 0;
            }
          }
          for (const v1::JobInfo& job : manager->List({})) count[JobStateLabel(job.state())] += 1;
          Samples samples;
          for (const auto& [state, value] : count) samples.push_back({{{"state", state}}, value});
          return samples;
        });
    scrape_gauges_->Add(
        "loom_job_history_bytes",
        "Bytes the coordinator keeps for the finished jobs it remembers (--max-finished-jobs), by "
        "part: plan, events and trace (compressed), fetched (tensors of a job that streamed its "
        "fetches, until the next such job releases them).",
        [manager = manager_.get()] {
          const JobManager::HistoryBytes bytes = manager->FinishedJobsBytes();
          return Samples{{{{"part", "plan"}}, static_cast<double>(bytes.plans)},
                         {{{"part", "events"}}, static_cast<double>(bytes.events)},
                         {{{"part", "trace"}}, static_cast<double>(bytes.traces)},
                         {{{"part", "fetched"}}, static_cast<double>(bytes.fetched)}};
        });
  } else {
    scrape_gauges_->Add("loom_coordinator_connected",
                        "Workers: 1 while the session with the coordinator is up, else 0.",
                        [session = session_.get()] {
                          return Samples{{{}, session->connected() ? 1.0 : 0.0}};
                        });
  }
}

Daemon::~Daemon() { Shutdown(absl::ZeroDuration()); }

void Daemon::Shutdown(absl::Duration grace) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  LOG(INFO) << "loomd shutting down";
  SetServing(false);
  if (manager_ != nullptr) {
    // Every job ends first, so that watchers receive the last events and their streams close.
    cluster_->SetDraining();
    manager_->Shutdown(grace);
  } else {
    // A worker lets its part of the running job finish (within the grace), then leaves.
    const absl::Time deadline = absl::Now() + grace;
    while (agent_->busy() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
    session_->Stop();
  }
  // Aborts and releases what still runs here. A job's part that does not end (a kernel that never
  // returns) would hold the process for good: it is abandoned after a bound, and the agent leaked
  // (its threads still use it); main exits without destroying the daemon then.
  if (!agent_->Stop(kAgentStopBound)) {
    LOG(ERROR) << "abandoned this node's agent: its job's part did not end within "
               << absl::FormatDuration(kAgentStopBound)
               << " of the stop (a kernel or a file read that does not return); its threads are "
               << "left running and the process exits without them";
    abandoned_agent_ = agent_.release();
  }
  agent_.reset();
  if (cluster_ != nullptr) cluster_->Stop();
  // Watchers get up to kWatchersDeadline to read their jobs' last events; then every call left
  // (the workers' sessions, a watch whose client stopped reading) is cancelled and every
  // connection closed at once. (Given a deadline, gRPC waits it out also for idle client
  // connections.)
  if (job_service_ != nullptr && !job_service_->WaitForWatchesToEnd(kWatchersDeadline)) {
    LOG(WARNING) << "watchers still open " << kWatchersDeadline
                 << " after the jobs ended: cancelling them";
  }
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  if (health_server_ != nullptr) {
    health_server_->Shutdown(std::chrono::system_clock::now());
    health_server_->Wait();
  }
  metrics_server_.reset();
  LOG(INFO) << "loomd stopped";
}

}  // namespace loom::daemon
