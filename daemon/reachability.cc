#include "daemon/reachability.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom::daemon {

absl::Status UnreachableNodesError(const std::string& job_id, const std::vector<int>& participants,
                                   const std::map<int, std::map<int, std::string>>& unreachable,
                                   const std::function<std::string(int node)>& describe) {
  // A node that every other node of the job failed to reach.
  std::vector<std::string> culprits;
  for (int node : participants) {
    bool reached_by_some = false;
    for (int other : participants) {
      if (other == node) continue;
      auto reports = unreachable.find(other);
      if (reports == unreachable.end() || !reports->second.contains(node)) reached_by_some = true;
    }
    if (!reached_by_some && participants.size() > 1) culprits.push_back(describe(node));
  }
  std::string message = absl::StrCat("job '", job_id, "' cannot start: ");
  if (!culprits.empty() && culprits.size() < participants.size()) {
    absl::StrAppend(&message, absl::StrJoin(culprits, " and "),
                    " cannot be reached from the other nodes of the job over UCX. ");
  } else {
    absl::StrAppend(&message, "its nodes cannot all reach each other over UCX. ");
  }
  std::vector<std::string> pairs;
  for (const auto& [node, peers] : unreachable) {
    for (const auto& [peer, why] : peers) {
      pairs.push_back(absl::StrCat(describe(node), " cannot reach ", describe(peer), ": ", why));
    }
  }
  absl::StrAppend(&message, absl::StrJoin(pairs, "; "),
                  ". Check that the nodes' UCX interfaces (UCX_NET_DEVICES, UCX_TLS) route to "
                  "each other and that no firewall drops their traffic.");
  return absl::UnavailableError(message);
}

}  // namespace loom::daemon
