#ifndef LOOM_CLIENT_LOOMCTL_FETCH_WRITER_H_
#define LOOM_CLIENT_LOOMCTL_FETCH_WRITER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/fetch_pieces.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"

namespace loom::loomctl {

// Writes a training run's fetched tensors to its --fetch-dir as their pieces assemble
// (JobOptions::sink_piece_callback), `<directory>/<tensor>_step<k>.npy` with k counted over the
// whole run (FetchedTensorPath), so that no piece is held until the run ends and the files of the
// steps done are there while it runs. A run may be made of segments (one plan each, --save-every),
// whose pieces are numbered after the previous segments'.
//
// Thread-safe: OnPiece runs on the sinks' stream threads and writes the file there (the sink's
// stream waits for it).
class FetchWriter {
 public:
  // Creates the directory (UNAVAILABLE naming it when it cannot be).
  static absl::StatusOr<std::unique_ptr<FetchWriter>> Create(const std::string& directory);

  // Starts a segment of `plan`, all of whose fetches are written. FAILED_PRECONDITION when two
  // of them would be written to the same files.
  absl::Status BeginSegment(const plan::Plan& plan);
  // Records a piece and writes the fetch's assembled piece once every rank's sink holds it; an
  // error (a piece that does not assemble, a file that cannot be written, naming it) fails the
  // job. Pieces of sinks that are no fetch's are ignored.
  absl::Status OnPiece(const SinkPiece& piece);
  // Ends a segment: FAILED_PRECONDITION naming the fetch when one of its pieces never reached
  // every rank.
  absl::Status EndSegment();

  // The sinks of the segment's fetches (JobOptions::reported_sinks).
  std::vector<std::string> sinks() const;
  // Every file written so far, by step and then in the plan's order of the fetches (as a run
  // that does not train lists them), whatever the order the pieces completed in.
  std::vector<std::string> paths() const;

 private:
  explicit FetchWriter(std::string directory) : directory_(std::move(directory)) {}

  const std::string directory_;
  mutable std::mutex mutex_;
  // The segment's fetches (guarded by mutex_).
  std::vector<FetchPieceAssembler> fetches_;
  // Per tensor: the pieces the previous segments wrote, and those of this segment (guarded).
  std::map<std::string, int64_t> pieces_before_;
  std::map<std::string, int64_t> pieces_written_;
  // The files written, by (step, index of the fetch in the plan) (guarded by mutex_).
  std::map<std::pair<int64_t, int>, std::string> paths_;
};

}  // namespace loom::loomctl

#endif  // LOOM_CLIENT_LOOMCTL_FETCH_WRITER_H_
