#include "transport/same_host_cpus.h"

namespace loom::transport {

SameHostCpus::SameHostCpus(const std::vector<int>& cpus) : cpus_(cpus.begin(), cpus.end()) {}

void SameHostCpus::AddPeer(const std::vector<int>& cpus) {
  ++processes_;
  cpus_.insert(cpus.begin(), cpus.end());
}

}  // namespace loom::transport
