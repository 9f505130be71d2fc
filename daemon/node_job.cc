#include "daemon/node_job.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/actor_factory.h"

namespace loom::daemon {

absl::StatusOr<std::unique_ptr<NodeJob>> NodeJob::Create(const plan::Plan& plan,
                                                         const KernelRegistry* kernels,
                                                         JobOptions options,
                                                         transport::UcxContextOptions ucx) {
  std::unique_ptr<NodeJob> job(new NodeJob());
  job->node_ = plan.node();
  absl::StatusOr<std::unique_ptr<transport::TransportNetwork>> network =
      transport::TransportNetwork::Create(plan.node(), std::move(ucx));
  if (!network.ok()) {
    return absl::Status(network.status().code(),
                        absl::StrCat("node ", plan.node(),
                                     ": opening the network (UCX): ", network.status().message()));
  }
  job->network_ = *std::move(network);
  options.network = job->network_.get();
  absl::StatusOr<std::unique_ptr<JobRuntime>> runtime =
      JobRuntime::Create(plan, kernels, MakeActorFactory(), std::move(options));
  if (!runtime.ok()) return runtime.status();
  job->runtime_ = *std::move(runtime);
  JobRuntime* runtime_pointer = job->runtime_.get();
  job->network_->SetHandlers(
      [runtime_pointer](const ActorMessage& message) {
        runtime_pointer->DeliverFromNetwork(message);
      },
      [runtime_pointer](const absl::Status& status) { runtime_pointer->Fail(status); });
  return job;
}

NodeJob::~NodeJob() {
  if (network_ != nullptr) network_->Stop();
  runtime_.reset();
}

absl::Status NodeJob::Connect(const std::map<int, std::string>& addresses) {
  for (const auto& [peer, address] : addresses) {
    if (peer == node_) continue;
    if (absl::Status status = network_->Connect(peer, address); !status.ok()) {
      unreachable_peers_.emplace(peer, status);
      continue;
    }
    peers_.push_back(peer);
    if (absl::Status status = network_->SendProbe(peer); !status.ok()) {
      unreachable_peers_.emplace(peer, status);
    }
  }
  return UnreachableError();
}

absl::Status NodeJob::WaitForPeers(absl::Duration timeout) {
  std::vector<int> waiting;
  for (int peer : peers_) {
    if (!unreachable_peers_.contains(peer)) waiting.push_back(peer);
  }
  absl::StatusOr<std::map<int, absl::Status>> unreachable =
      network_->WaitForProbes(waiting, timeout);
  if (!unreachable.ok()) return unreachable.status();  // aborted
  unreachable_peers_.merge(*unreachable);
  return UnreachableError();
}

absl::Status NodeJob::UnreachableError() const {
  if (unreachable_peers_.empty()) return absl::OkStatus();
  std::string message = absl::StrCat("node ", node_, " cannot reach ");
  bool first = true;
  for (const auto& [peer, why] : unreachable_peers_) {
    absl::StrAppend(&message, first ? "" : "; ", "node ", peer, ": ", why.message());
    first = false;
  }
  return absl::UnavailableError(message);
}

absl::Status NodeJob::Start() { return runtime_->Start(); }

absl::Status NodeJob::Wait() {
  absl::Status status = runtime_->Wait();
  network_->JobEnded();
  return status;
}

void NodeJob::Abort(absl::Status reason) {
  network_->InterruptProbeWait(reason);
  runtime_->Abort(std::move(reason));
}

}  // namespace loom::daemon
