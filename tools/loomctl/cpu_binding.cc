#include "tools/loomctl/cpu_binding.h"

#include <sched.h>

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace loom::loomctl {
namespace {

constexpr char kFlag[] = "--bind-cpus";

absl::StatusOr<int> ParseCpu(absl::string_view text, absl::string_view list) {
  int cpu = 0;
  if (!absl::SimpleAtoi(text, &cpu) || cpu < 0 || cpu >= CPU_SETSIZE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' in the CPU list '", list, "' is not a CPU number (0-", CPU_SETSIZE - 1, ")"));
  }
  return cpu;
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("an empty CPU list");
  std::vector<int> cpus;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    absl::StatusOr<int> first = ParseCpu(ends[0], text);
    if (!first.ok()) return first.status();
    absl::StatusOr<int> last = ends.size() == 2 ? ParseCpu(ends[1], text) : first;
    if (!last.ok()) return last.status();
    if (*last < *first) {
      return absl::InvalidArgumentError(
          absl::StrCat("the range '", part, "' in the CPU list '", text, "' runs backwards"));
    }
    for (int cpu = *first; cpu <= *last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<std::string> ranges;
  for (size_t begin = 0; begin < cpus.size();) {
    size_t end = begin + 1;
    while (end < cpus.size() && cpus[end] == cpus[end - 1] + 1) ++end;
    ranges.push_back(end - begin == 1 ? absl::StrCat(cpus[begin])
                                      : absl::StrCat(cpus[begin], "-", cpus[end - 1]));
    begin = end;
  }
  return absl::StrJoin(ranges, ",");
}

absl::StatusOr<std::vector<std::vector<int>>> NodeCpus(absl::string_view spec, int nodes,
                                                       const std::vector<int>& allowed) {
  std::vector<std::vector<int>> node_cpus;
  if (spec == "none") return node_cpus;
  const std::string available = FormatCpuList(allowed);
  if (spec == "auto") {
    const int cpus = static_cast<int>(allowed.size());
    if (cpus < nodes) {
      // The example shares the CPUs out in turn.
      std::vector<int> example;
      for (int node = 0; node < nodes && cpus > 0; ++node) example.push_back(allowed[node % cpus]);
      return absl::InvalidArgumentError(absl::StrCat(kFlag, " auto: ", nodes,
                                                     " nodes but this process may use only ", cpus,
                                                     cpus == 1 ? " CPU (" : " CPUs (", available,
                                                     "); give fewer nodes, a list per node (e.g. ",
                                                     absl::StrJoin(example, "/"), "), or none"));
    }
    int next = 0;
    for (int node = 0; node < nodes; ++node) {
      const int count = cpus / nodes + (node < cpus % nodes ? 1 : 0);
      node_cpus.emplace_back(allowed.begin() + next, allowed.begin() + next + count);
      next += count;
    }
    return node_cpus;
  }
  const std::vector<absl::string_view> lists = absl::StrSplit(spec, '/');
  if (static_cast<int>(lists.size()) != nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFlag, " '", spec, "' has ", lists.size(), lists.size() == 1 ? " CPU list" : " CPU lists",
        " for ", nodes, nodes == 1 ? " node" : " nodes",
        ": give none, auto, or one list per node separated by '/' (e.g. 0-1/2-3)"));
  }
  for (size_t node = 0; node < lists.size(); ++node) {
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(lists[node]);
    if (!cpus.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kFlag, " '", spec, "', node", node, ": ", cpus.status().message()));
    }
    for (int cpu : *cpus) {
      if (!std::binary_search(allowed.begin(), allowed.end(), cpu)) {
        return absl::InvalidArgumentError(absl::StrCat(kFlag, " '", spec, "', node", node, ": CPU ",
                                                       cpu, " is not one this process may use (",
                                                       available, ")"));
      }
    }
    node_cpus.push_back(*std::move(cpus));
  }
  return node_cpus;
}

}  // namespace loom::loomctl
