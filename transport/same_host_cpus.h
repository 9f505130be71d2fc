#ifndef LOOM_TRANSPORT_SAME_HOST_CPUS_H_
#define LOOM_TRANSPORT_SAME_HOST_CPUS_H_

#include <vector>

#include "absl/container/flat_hash_set.h"

namespace loom::transport {

// The processes of a Transport's job on this host (itself and its same-host peers) and the CPUs
// they may run on together (runtime/cpu_affinity.h): whether a thread of this process waiting in
// Transport::DriveUntil polls before it sleeps (TransportOptions::progress_spin). Polling pays
// only while every process has a core to poll on; where the processes outnumber the CPUs they may
// use (four ranks on two cores, a cluster started under `taskset -c 0`, `--bind-cpus 0/0`), the
// polling processes take each other's cores. The host's core count alone misses the last two.
//
// Decision: the CPUs are counted together (their union), not matched to processes one by one:
// a peer bound to CPUs another peer is bound to as well still counts them, which errs only for
// mixed bindings such as 0/0/1-2; the usual cases (no binding, one set for all, disjoint sets) are
// exact.
class SameHostCpus {
 public:
  // This process, which may run on `cpus`.
  explicit SameHostCpus(const std::vector<int>& cpus);

  // A same-host peer that may run on `cpus` (empty when they could not be read: counted as a
  // process with no CPUs of its own).
  void AddPeer(const std::vector<int>& cpus);

  // Whether the processes have as many CPUs as there are processes.
  bool HaveACoreEach() const { return processes_ <= static_cast<int>(cpus_.size()); }
  int processes() const { return processes_; }
  int cpus() const { return static_cast<int>(cpus_.size()); }

 private:
  int processes_ = 1;
  absl::flat_hash_set<int> cpus_;
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_SAME_HOST_CPUS_H_
