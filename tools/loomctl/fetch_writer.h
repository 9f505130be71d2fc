#ifndef LOOM_TOOLS_LOOMCTL_FETCH_WRITER_H_
#define LOOM_TOOLS_LOOMCTL_FETCH_WRITER_H_

// FetchWriter: the writer of `loomctl run --fetch-dir`. It assembles the fetched tensors' pieces as
// the sinks produce them and writes each as a .npy file on a thread of its own, with the bytes
// waiting to be written bounded, so that no piece is held until the run ends.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "node/fetch_pieces.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"

namespace loom::loomctl {

// Writes a training run's fetched tensors to its --fetch-dir as their pieces assemble
// (JobOptions::sink_piece_callback), `<directory>/<tensor>_step<k>.npy` with k counted over the
// whole run (FetchedTensorPath), so that no piece is held until the run ends and the files of the
// steps done are there while it runs. A run may be made of segments (one plan each, --save-every),
// whose pieces are numbered after the previous segments'. The evaluation's fetch (Fetch.evaluation)
// is not written: its values are the step lines' validation losses.
//
// The files are written on a thread of the writer's own, so that a sink's stream (a device's
// compute stream) waits for the assembly of a piece, not for the disk. The pieces waiting to be
// written hold at most `max_queued_bytes`; a sink that completes a piece beyond that waits until
// the writes make room (a slow disk slows the run instead of filling the host's memory).
//
// Thread-safe: OnPiece runs on the sinks' stream threads.
class FetchWriter {
 public:
  static constexpr int64_t kDefaultMaxQueuedBytes = int64_t{64} << 20;

  // Creates the directory (UNAVAILABLE naming it when it cannot be) and starts the writing thread.
  static absl::StatusOr<std::unique_ptr<FetchWriter>> Create(
      const std::string& directory, int64_t max_queued_bytes = kDefaultMaxQueuedBytes);
  // Writes the pieces still queued, then ends the writing thread.
  ~FetchWriter();
  FetchWriter(const FetchWriter&) = delete;
  FetchWriter& operator=(const FetchWriter&) = delete;

  // Starts a segment of `plan`, all of whose fetches are written. FAILED_PRECONDITION when two
  // of them would be written to the same files.
  absl::Status BeginSegment(const plan::Plan& plan);
  // Records a piece and queues the fetch's assembled piece for writing once every rank's sink
  // holds it. An error fails the job: a piece that does not assemble, or a file that could not
  // be written (the first such error, naming the file, from then on). Pieces of sinks that are no
  // fetch's are ignored.
  absl::Status OnPiece(const SinkPiece& piece);
  // Ends a segment once every queued piece is written: the first write error, or
  // FAILED_PRECONDITION naming the fetch when one of its pieces never reached every rank.
  absl::Status EndSegment();

  // The sinks of the segment's fetches (JobOptions::reported_sinks).
  std::vector<std::string> sinks() const;
  // Every file written so far, by step and then in the plan's order of the fetches (as a run
  // that does not train lists them), whatever the order the pieces completed in.
  std::vector<std::string> paths() const;

 private:
  // A file to write: its place in paths() (step, index of the fetch in the plan) and contents.
  struct QueuedFile {
    std::pair<int64_t, int> order;
    std::string path;
    HostTensor tensor;
  };

  FetchWriter(std::string directory, int64_t max_queued_bytes)
      : directory_(std::move(directory)), max_queued_bytes_(max_queued_bytes) {}
  void WriteLoop();

  const std::string directory_;
  const int64_t max_queued_bytes_;
  mutable std::mutex mutex_;
  // Notified when a file was queued or written, and at the end.
  std::condition_variable changed_;
  // Guarded by mutex_ from here on.
  // The segment's fetches.
  std::vector<FetchPieceAssembler> fetches_;
  // Per tensor: the pieces the previous segments wrote, and those of this segment.
  std::map<std::string, int64_t> pieces_before_;
  std::map<std::string, int64_t> pieces_written_;
  // The files written, by (step, index of the fetch in the plan).
  std::map<std::pair<int64_t, int>, std::string> paths_;
  std::deque<QueuedFile> queue_;
  int64_t queued_bytes_ = 0;  // of the files queued and the one being written
  bool writing_ = false;      // the writing thread writes a file it took from the queue
  absl::Status write_error_;  // the first file that could not be written
  bool stopping_ = false;
  std::thread writer_;  // started by Create
};

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_FETCH_WRITER_H_
