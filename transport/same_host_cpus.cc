#include "transport/same_host_cpus.h"

namespace loom::transport {

SameHostCpus::SameHostCpus(const std::vector<int>& cpus) {
  AddKnown(cpus);
  Decide();
}

void SameHostCpus::AddPeer(const std::vector<int>& cpus) {
  if (cpus.empty()) {
    ++unknown_processes_;
  } else {
    AddKnown(cpus);
  }
  Decide();
}

void SameHostCpus::AddKnown(const std::vector<int>& cpus) {
  cpus_of_process_.push_back(cpus);
  all_cpus_.insert(cpus.begin(), cpus.end());
  absl::flat_hash_set<int> visited;
  if (GiveACpu(static_cast<int>(cpus_of_process_.size()) - 1, visited)) ++matched_processes_;
}

bool SameHostCpus::GiveACpu(int process, absl::flat_hash_set<int>& visited) {
  for (int cpu : cpus_of_process_[process]) {
    if (!visited.insert(cpu).second) continue;
    auto owner = process_of_cpu_.find(cpu);
    if (owner == process_of_cpu_.end() || GiveACpu(owner->second, visited)) {
      process_of_cpu_[cpu] = process;
      return true;
    }
  }
  return false;
}

void SameHostCpus::Decide() {
  // Every known process has a CPU of its own, and the CPUs left over suffice for the unknown ones
  // (which may take any).
  const int known = static_cast<int>(cpus_of_process_.size());
  have_a_cpu_each_ = matched_processes_ == known && cpus() - known >= unknown_processes_;
}

}  // namespace loom::transport
