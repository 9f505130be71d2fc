#include "daemon/daemon.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cpu_kernels.h"

namespace loom::daemon {
namespace {

// How long in-flight calls (watchers) get once every job has ended.
constexpr auto kServerShutdownDeadline = std::chrono::seconds(5);

// "127.0.0.1:0" with port 7071 -> "127.0.0.1:7071".
std::string WithPort(const std::string& address, int port) {
  return absl::StrCat(address.substr(0, address.rfind(':')), ":", port);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& options) {
  std::unique_ptr<Daemon> daemon(new Daemon());
  daemon->options_ = options;
  if (absl::Status status = RegisterCpuKernels(&daemon->kernels_); !status.ok()) return status;
  SetBlasThreads(options.blas_threads);

  JobManager::Options manager_options;
  manager_options.capacity.devices = compiler::DeviceSet::Cpus(options.cpu_devices, 1);
  manager_options.capacity.memory_budget_per_device_bytes = options.memory_budget_per_device_bytes;
  manager_options.stall_timeout = options.stall_timeout;
  manager_options.max_finished_jobs = options.max_finished_jobs;
  manager_options.max_events_per_job = options.max_events_per_job;
  daemon->manager_ = std::make_unique<JobManager>(std::move(manager_options), &daemon->kernels_);
  daemon->job_service_ = std::make_unique<JobServiceImpl>(daemon->manager_.get());

  // Both are process-wide settings of gRPC that take effect in the builders made after them.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen_address, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.RegisterService(daemon->job_service_.get());
  // The node's address (with the port picked) is set once the port is bound.
  daemon->cluster_service_ =
      std::make_unique<ClusterServiceImpl>(options.node_name, daemon->manager_.get());
  builder.RegisterService(daemon->cluster_service_.get());
  daemon->server_ = builder.BuildAndStart();
  if (daemon->server_ == nullptr || port == 0) {
    daemon->manager_.reset();
    return absl::UnavailableError(absl::StrCat("cannot serve on '", options.listen_address,
                                               "': the address is in use or not local"));
  }
  daemon->port_ = port;
  daemon->address_ = WithPort(options.listen_address, port);
  daemon->cluster_service_->set_address(daemon->address_);
  grpc::HealthCheckServiceInterface* health = daemon->server_->GetHealthCheckService();
  if (health != nullptr) {
    health->SetServingStatus(true);
    health->SetServingStatus(v1::JobService::service_full_name(), true);
    health->SetServingStatus(v1::ClusterService::service_full_name(), true);
  }
  daemon->manager_->Start();
  LOG(INFO) << "loomd node '" << options.node_name << "' serving on " << daemon->address_
            << " with " << options.cpu_devices << " CPU devices";
  return daemon;
}

Daemon::~Daemon() { Shutdown(absl::ZeroDuration()); }

void Daemon::Shutdown(absl::Duration grace) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  LOG(INFO) << "loomd shutting down";
  if (grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
      health != nullptr) {
    health->SetServingStatus(false);
  }
  // Every job ends first, so that watchers receive the last events and their streams close.
  manager_->Shutdown(grace);
  server_->Shutdown(std::chrono::system_clock::now() + kServerShutdownDeadline);
  server_->Wait();
  LOG(INFO) << "loomd stopped";
}

}  // namespace loom::daemon
