#ifndef LOOM_DAEMON_NODE_JOB_H_
#define LOOM_DAEMON_NODE_JOB_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/kernel_registry.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"
#include "runtime/job_runtime.h"
#include "transport/transport_network.h"

namespace loom::daemon {

// One node's part of a job that spans nodes: the node's plan, its runtime, and the UCX network to
// the other nodes (one per job, so its worker address is exchanged at every launch).
//
//   auto job = NodeJob::Create(node_plan, &kernels, options);   // builds actors, opens UCX
//   publish (*job)->address(); collect every node's address
//   (*job)->Connect(addresses);                                   // every node, then a barrier
//   (*job)->Start(); (*job)->Wait();
//   once every node's Wait returned: destroy it (stops the network)
//
// The network outlives the node's own end: a node that finished may still have messages and
// transfers on their way to nodes that have not (its last END_OF_DATA, a collective's last
// chunk), so it is stopped only after every node ended (the coordinator's end barrier), or when
// the job failed.
// A lost peer, a failed transfer or a mismatched message fails the runtime with an error that
// names the nodes; Abort ends the job from outside (the coordinator's abort of another node).
class NodeJob {
 public:
  // `options.network` and, for communicators that span nodes, the collective backend factory are
  // filled in here (a factory already in `options` is asked first).
  static absl::StatusOr<std::unique_ptr<NodeJob>> Create(const plan::Plan& plan,
                                                         const KernelRegistry* kernels,
                                                         JobOptions options,
                                                         transport::UcxContextOptions ucx = {});
  // Stops the network, then destroys the runtime (aborting it if it still runs).
  ~NodeJob();

  int node() const { return node_; }
  const std::string& address() const { return network_->address(); }
  // Connects to every other node of `addresses` (node -> address; this node's entry is skipped).
  absl::Status Connect(const std::map<int, std::string>& addresses);
  absl::Status Start();
  // Blocks until the job ends on this node; returns the job's status.
  absl::Status Wait();
  void Abort(absl::Status reason);

  JobRuntime& runtime() { return *runtime_; }

 private:
  NodeJob() = default;

  int node_ = 0;
  std::unique_ptr<transport::TransportNetwork> network_;
  std::unique_ptr<JobRuntime> runtime_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_NODE_JOB_H_
