#ifndef LOOM_TRANSPORT_SAME_HOST_CPUS_H_
#define LOOM_TRANSPORT_SAME_HOST_CPUS_H_

// SameHostCpus: whether the processes of a Transport's job on this host can each run on a CPU of
// their own (a matching of processes to the CPUs they may use), which decides whether a thread in
// Transport::DriveUntil polls busily or yields its CPU between polls.

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"

namespace loom::transport {

// The processes of a Transport's job on this host (itself and its same-host peers) and the CPUs
// they may run on (core/cpu_affinity.h): whether a thread of this process waiting in
// Transport::DriveUntil polls busily before it sleeps (TransportOptions::progress_spin) or yields
// its CPU between polls (TransportOptions::shared_cpu_poll). A busy poll pays only while every
// process has a core to poll on; where the processes outnumber the CPUs they may use (four ranks
// on two cores, a cluster started under `taskset -c 0`, `--bind-cpus 0/0`), busily polling
// processes hold each other's cores. The host's core count alone misses the last two.
//
// "A core each" means each process can be given a CPU of its own among those it may run on (a
// matching of processes to CPUs, grown by one augmenting path per peer): the mixed binding
// 0 / 0 / 1-2 has three CPUs for three processes but two of them on CPU 0, and is refused, where
// counting the union of the sets would accept it.
class SameHostCpus {
 public:
  // This process, which may run on `cpus`.
  explicit SameHostCpus(const std::vector<int>& cpus);

  // A same-host peer that may run on `cpus`. Empty when they could not be read: a process that
  // may take any CPU the others may use, so it needs one of them left free.
  void AddPeer(const std::vector<int>& cpus);

  bool HaveACpuEach() const { return have_a_cpu_each_; }
  int processes() const { return static_cast<int>(cpus_of_process_.size()) + unknown_processes_; }
  // The CPUs any of the processes may use.
  int cpus() const { return static_cast<int>(all_cpus_.size()); }

 private:
  // Adds a process whose CPUs are known and tries to give it a CPU of its own, moving the
  // processes already given one along an augmenting path where needed.
  void AddKnown(const std::vector<int>& cpus);
  // Depth-first search for an augmenting path from `process`; `visited` the CPUs tried.
  bool GiveACpu(int process, absl::flat_hash_set<int>& visited);
  void Decide();

  std::vector<std::vector<int>> cpus_of_process_;  // the processes whose CPUs are known
  int unknown_processes_ = 0;
  absl::flat_hash_set<int> all_cpus_;
  absl::flat_hash_map<int, int> process_of_cpu_;  // the matching
  int matched_processes_ = 0;
  bool have_a_cpu_each_ = false;
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_SAME_HOST_CPUS_H_
