#ifndef LOOM_DAEMON_NODE_JOB_H_
#define LOOM_DAEMON_NODE_JOB_H_

// NodeJob: one node's part of a job that spans nodes: its plan's JobRuntime and the UCX
// TransportNetwork to the other nodes (one per job). It goes through the phases the coordinator
// drives (Create, Connect, WaitForPeers, JoinCommunicators, Start, Wait); the NodeAgent holds the
// current one.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
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
//   publish (*job)->address() and communicator_ids(); collect every node's
//   (*job)->Connect(addresses);                                   // every node
//   (*job)->WaitForPeers(probe_timeout);                          // every node
//   (*job)->JoinCommunicators(ids);                               // every node, then a barrier
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
  // Connects to every other node of `addresses` (node -> address; this node's entry is skipped)
  // and sends each a probe. A peer it cannot connect to is unreachable (below); the error names
  // every such peer.
  absl::Status Connect(const std::map<int, std::string>& addresses);
  // After Connect, on every node of the job: waits (at most `timeout`) until each peer's probe
  // arrived, so that a node that cannot reach another fails the launch instead of the job's first
  // transfer. UNAVAILABLE naming every peer not heard from, with why (UCX's error, or the
  // timeout); unreachable_peers() lists them. Abort ends the wait at once with its reason.
  absl::Status WaitForPeers(absl::Duration timeout);
  // What this node's communicators that span nodes need their ranks elsewhere to have (NCCL's
  // unique id, made here when rank 0 is here): communicator -> identifier; empty for CPU jobs.
  std::map<std::string, std::string> communicator_ids() const {
    return runtime_->CommunicatorJoinIds();
  }
  // After WaitForPeers, on every node, with every node's communicator_ids merged: joins the
  // communicators that need it, waiting at most `timeout` (JobRuntime::JoinCommunicators). The
  // error names the communicator.
  absl::Status JoinCommunicators(const std::map<std::string, std::string>& ids,
                                 absl::Duration timeout) {
    return runtime_->JoinCommunicators(ids, timeout);
  }
  // The peers Connect or WaitForPeers found unreachable, by node, with why.
  const std::map<int, absl::Status>& unreachable_peers() const { return unreachable_peers_; }
  absl::Status Start();
  // Blocks until the job ends on this node; returns the job's status. From then on a peer that
  // leaves (released before this node) is no error.
  absl::Status Wait();
  void Abort(absl::Status reason);

  JobRuntime& runtime() { return *runtime_; }

 private:
  NodeJob() = default;

  // "node 1 cannot reach node 2: ...; node 3: ...".
  absl::Status UnreachableError() const;

  int node_ = 0;
  std::vector<int> peers_;  // connected to (and probed)
  std::map<int, absl::Status> unreachable_peers_;
  std::unique_ptr<transport::TransportNetwork> network_;
  std::unique_ptr<JobRuntime> runtime_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_NODE_JOB_H_
