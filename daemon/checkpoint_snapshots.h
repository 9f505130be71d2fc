#ifndef LOOM_DAEMON_CHECKPOINT_SNAPSHOTS_H_
#define LOOM_DAEMON_CHECKPOINT_SNAPSHOTS_H_

// A node's parts of the checkpoints a job saves every few steps (LaunchNodeJob.
// checkpoint_every_steps): CheckpointSnapshots collects the snapshots the node's VARIABLE tasks
// hand over after each step and writes the node's part of a complete step's checkpoint on a writer
// thread of its own, for the coordinator to assemble. The NodeAgent holds one per such job.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/file_roots.h"
#include "proto/plan.pb.h"
#include "runtime/variable_snapshot.h"

namespace loom::daemon {

// A node's parts of the checkpoints a job saves every few steps (LaunchNodeJob.
// checkpoint_every_steps). The node's VARIABLE tasks hand it their snapshots
// (JobOptions::variable_snapshot_callback); once it holds every task's snapshot of a step, its
// writer thread writes the node's part of that step's checkpoint
// (CheckpointPartPath(StepPartsPath(path, step), node)) and calls `written(step, OK)`, which
// reports it to the coordinator; or, when the part cannot be written, `written(step, error)` (the
// error names the step), which fails the job at once. The job goes on meanwhile.
//
// Memory: a step's snapshots are held until its part is written. A step that completes while an
// older one still waits for the writer replaces it (the coordinator saves the newest checkpoint
// every node has written), so at most one step waits, one is written, and the steps whose
// snapshots are still coming in (pipeline stages a few steps apart) are held.
//
// The parts it wrote are removed when it is destroyed: by then the coordinator has assembled the
// ones it needed (it releases a node's job only after that), and a failed job's are of no use.
class CheckpointSnapshots {
 public:
  using WrittenCallback = std::function<void(int64_t step, const absl::Status& status)>;

  // `plan`: the node's plan (its VARIABLE tasks are the ones to collect); `roots`: the node's
  // --checkpoint-root directories, beneath which the parts are written and removed (not owned,
  // must outlive this); `path`: the job's checkpoint path.
  CheckpointSnapshots(const plan::Plan& plan, const FileRoots* roots, std::string path,
                      WrittenCallback written);
  // Stops the writer (a part being written is finished first) and removes the parts written.
  ~CheckpointSnapshots();

  CheckpointSnapshots(const CheckpointSnapshots&) = delete;
  CheckpointSnapshots& operator=(const CheckpointSnapshots&) = delete;

  // For JobOptions::variable_snapshot_callback (thread-safe). Fails (which fails the job) when an
  // earlier part could not be written, with that error, or for a task that is no VARIABLE of the
  // node or a step it already gave.
  absl::Status Add(VariableSnapshot snapshot);

  // After the node's job succeeded (no snapshot comes any more): waits until the part of the last
  // complete step is written. The error of a part that could not be written, if any.
  absl::Status Finish();

 private:
  using Variables = std::map<std::string, VariableOnHost>;

  void WriterLoop();

  const int node_;
  const FileRoots* const roots_;
  const std::string path_;
  const std::vector<std::string> tasks_;
  const WrittenCallback written_;

  std::mutex mutex_;
  std::condition_variable changed_;
  // Steps whose snapshots are coming in, by step.
  std::map<int64_t, Variables> collecting_;
  // The newest complete step not yet taken by the writer.
  std::optional<std::pair<int64_t, Variables>> ready_;
  bool writing_ = false;
  bool stopping_ = false;
  absl::Status error_;
  std::vector<std::string> written_parts_;
  std::thread writer_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_CHECKPOINT_SNAPSHOTS_H_
