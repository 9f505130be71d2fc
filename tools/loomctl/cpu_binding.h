#ifndef LOOM_TOOLS_LOOMCTL_CPU_BINDING_H_
#define LOOM_TOOLS_LOOMCTL_CPU_BINDING_H_

// CPU binding for `loomctl cluster up --bind-cpus`: CPU lists as taskset writes them (ParseCpuList,
// FormatCpuList) and NodeCpus, which splits the CPUs loomctl may use among the daemons ("auto") or
// takes one list per daemon. cluster_command.cc reads the flag with it; the lists go to
// StartLocalCluster.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::loomctl {

// Which CPUs `loomctl cluster up --bind-cpus` binds its daemons to (docs/OPERATIONS.md, several
// loomds on one host), out of those loomctl may use (core/cpu_affinity.h).

// A CPU list as taskset -c and /proc/PID/status's Cpus_allowed_list write it: "0-3,8" is
// {0, 1, 2, 3, 8}. Parsing returns the CPUs ascending, each once; INVALID_ARGUMENT names the part
// that is not a CPU number or range.
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text);
std::string FormatCpuList(const std::vector<int>& cpus);

// The CPUs of each of `nodes` daemons for a --bind-cpus value:
//  - "none": no binding (an empty result);
//  - "auto": `allowed` in order, split into `nodes` groups of consecutive CPUs (as equal as they
//    go: the first groups take one more); fewer CPUs than nodes is an error, since daemons that
//    share a core are what binding avoids;
//  - "LIST/LIST/...": one CPU list per node (e.g. "0-1/2-3"), each CPU one of `allowed`.
// INVALID_ARGUMENT naming the flag and what is wrong.
absl::StatusOr<std::vector<std::vector<int>>> NodeCpus(absl::string_view spec, int nodes,
                                                       const std::vector<int>& allowed);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_CPU_BINDING_H_
