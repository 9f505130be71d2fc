#include "daemon/job_run.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "core/tensor_bytes.h"

namespace loom::daemon {

absl::Duration JoinTimeout(absl::Duration launch_timeout, absl::Duration probe_timeout) {
  return std::max(launch_timeout - probe_timeout - absl::Seconds(2), absl::Seconds(1));
}

std::vector<int> NodesOf(const compiler::CompileResult& result) {
  std::vector<int> nodes;
  for (const plan::Plan& node_plan : result.node_plans) {
    if (node_plan.tasks_size() > 0) nodes.push_back(node_plan.node());
  }
  return nodes;
}

bool PieceSizeMatches(const v1::SinkPieceUpdate& piece) {
  return BytesHoldTensor(piece.data_type(), piece.shape(),
                         static_cast<int64_t>(piece.data().size()));
}

void CountMoeFetches(const plan::Plan& plan, StepTracker* tracker, DaemonMetrics* metrics) {
  auto values = [](const HostTensor& tensor) {
    std::vector<float> floats(tensor.bytes.size() / sizeof(float));
    std::memcpy(floats.data(), tensor.bytes.data(), floats.size() * sizeof(float));
    return floats;
  };
  for (const plan::Fetch& fetch : plan.fetches()) {
    if (fetch.logical().data_type() != plan::FLOAT32) continue;
    if (fetch.tensor() == kMoeDroppedFetch) {
      tracker->AddCountedFetch(fetch, [metrics, values](const HostTensor& tensor) {
        for (float dropped : values(tensor)) metrics->AddDroppedAssignments(dropped);
      });
    } else if (fetch.tensor() == kMoeTokensPerExpertFetch) {
      tracker->AddCountedFetch(fetch, [metrics, values](const HostTensor& tensor) {
        metrics->AddExpertAssignments(values(tensor));
      });
    }
  }
}

absl::Status CancelledAtShutdown(const JobRecord& record) {
  return absl::CancelledError(
      absl::StrCat("job '", record.id, "' was cancelled: the daemon shut down before it started"));
}

}  // namespace loom::daemon
