#include "daemon/checkpoint_snapshots.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/job_checkpoint.h"
#include "glog/logging.h"

namespace loom::daemon {
namespace {

std::vector<std::string> VariableTasks(const plan::Plan& plan) {
  std::vector<std::string> tasks;
  for (const plan::Task& task : plan.tasks()) {
    if (task.kind() == plan::VARIABLE) tasks.push_back(task.name());
  }
  return tasks;
}

}  // namespace

CheckpointSnapshots::CheckpointSnapshots(const plan::Plan& plan, const FileRoots* roots,
                                         std::string path, WrittenCallback written)
    : node_(plan.node()),
      roots_(roots),
      path_(std::move(path)),
      tasks_(VariableTasks(plan)),
      written_(std::move(written)),
      writer_([this] { WriterLoop(); }) {}

CheckpointSnapshots::~CheckpointSnapshots() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  writer_.join();
  // Most are gone: the coordinator removes what it read.
  for (const std::string& part : written_parts_) {
    if (roots_ == nullptr) break;
    absl::StatusOr<WritableDirectory> directory = roots_->OpenForWriting(part);
    if (directory.ok()) ::unlinkat(directory->descriptor(), directory->name().c_str(), 0);
  }
}

absl::Status CheckpointSnapshots::Add(VariableSnapshot snapshot) {
  if (std::find(tasks_.begin(), tasks_.end(), snapshot.task) == tasks_.end()) {
    return absl::InternalError(absl::StrCat("node ", node_, " has no VARIABLE task '",
                                            snapshot.task, "' to take a snapshot of"));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_.ok()) return error_;
    Variables& step = collecting_[snapshot.step];
    if (!step.emplace(snapshot.task, std::move(snapshot.variable)).second) {
      return absl::InternalError(absl::StrCat("a second snapshot of task '", snapshot.task,
                                              "' after step ", snapshot.step));
    }
    if (step.size() < tasks_.size()) return absl::OkStatus();
    // Every variable's snapshots come in step order, so steps complete in order: this one is the
    // newest complete step, and one still waiting for the writer is older.
    if (ready_.has_value()) {
      VLOG(1) << "node " << node_ << ": the checkpoint after step " << ready_->first
              << " is skipped: the one after step " << snapshot.step << " is ready first";
    }
    ready_.emplace(snapshot.step, std::move(step));
    collecting_.erase(snapshot.step);
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status CheckpointSnapshots::Finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !error_.ok() || (!ready_.has_value() && !writing_); });
  return error_;
}

void CheckpointSnapshots::WriterLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || ready_.has_value(); });
    if (stopping_) return;
    auto [step, variables] = *std::move(ready_);
    ready_.reset();
    writing_ = true;
    const std::string part = CheckpointPartPath(StepPartsPath(path_, step), node_);
    lock.unlock();
    absl::Status status =
        roots_ == nullptr
            ? absl::PermissionDeniedError(absl::StrCat(
                  "node ", node_, " writes no checkpoint parts (no --checkpoint-root given)"))
            : WriteCheckpointPart(node_, std::move(variables), *roots_, part);
    if (!status.ok()) {
      status = absl::Status(
          status.code(), absl::StrCat("the checkpoint after step ", step, ": ", status.message()));
    }
    written_(step, status);
    lock.lock();
    if (status.ok()) written_parts_.push_back(part);
    writing_ = false;
    if (!status.ok() && error_.ok()) error_ = status;
    changed_.notify_all();
  }
}

}  // namespace loom::daemon
