#ifndef LOOM_RUNTIME_VARIABLE_SNAPSHOT_H_
#define LOOM_RUNTIME_VARIABLE_SNAPSHOT_H_

// Host copies of variables, for checkpoints: VariableOnHost (a value and its optimizer states),
// VariableSnapshot and VariableSnapshotCallback (periodic snapshots while a job runs), and
// VariableHolder, which the VARIABLE actor implements for both the snapshots and the final
// checkpoint.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace loom {

// A VARIABLE task's value and optimizer states (in the task's state order), on the host.
struct VariableOnHost {
  HostTensor value;
  std::vector<HostTensor> states;
};

// A variable as it was after `step` optimizer steps of the job (1-based: after step k's update),
// taken while the job runs (JobOptions::snapshot_every_steps) for periodic checkpoints.
struct VariableSnapshot {
  const std::string& task;
  int64_t step;
  VariableOnHost variable;
};

// Called by a VARIABLE actor with each snapshot it takes.
//
// Threading: it runs on the variable's stream thread, inside the act that made the step's update,
// before the value is published to its readers. Variables on different streams call it
// concurrently, so it must be thread-safe; one variable's snapshots arrive in step order, but
// variables of different pipeline stages may be a few steps apart. It must be quick (take the
// snapshot and return: the variable's stream waits) and must not block on other actors. An error it
// returns fails the job, like an optimizer error of that variable.
using VariableSnapshotCallback = std::function<absl::Status(VariableSnapshot)>;

// What a VARIABLE actor offers: its value and states copied to the host on its own stream (a
// GPU's are in device memory). The one copy behind both checkpoints: the periodic snapshots above
// and, after a run, the final checkpoint (JobRuntime::CopyVariableToHost).
class VariableHolder {
 public:
  virtual ~VariableHolder() = default;
  virtual absl::StatusOr<VariableOnHost> CopyVariableToHost() const = 0;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_VARIABLE_SNAPSHOT_H_
