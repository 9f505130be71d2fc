#include "daemon/fetch_stream.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"

namespace loom::daemon {
namespace {

constexpr int64_t kMaxBytes = std::numeric_limits<int64_t>::max();

// a * b for non-negative numbers, kMaxBytes where it would be more.
int64_t SaturatingProduct(int64_t a, int64_t b) {
  return (a > 0 && b > kMaxBytes / a) ? kMaxBytes : a * b;
}

// The bytes of one piece of `fetch` (its logical tensor).
int64_t PieceBytes(const plan::Fetch& fetch) {
  int64_t bytes = DataTypeSize(fetch.logical().data_type());
  for (int64_t extent : fetch.logical().shape()) bytes = SaturatingProduct(bytes, extent);
  return bytes;
}

}  // namespace

absl::Status FetchStream::CheckLimits(const plan::Plan& plan, int64_t steps,
                                      int64_t max_piece_bytes, int64_t max_job_bytes) {
  const int64_t pieces_per_fetch =
      SaturatingProduct(std::max<int64_t>(steps, 1), std::max(plan.num_micro_batches(), 1));
  if (plan.fetches().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", plan.job_name(),
                     "' streams its fetched tensors but fetches none (name them in Job.fetch)"));
  }
  int64_t job_bytes = 0;
  for (const plan::Fetch& fetch : plan.fetches()) {
    const int64_t piece_bytes = PieceBytes(fetch);
    if (piece_bytes > max_piece_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "fetched tensor '", fetch.tensor(), "' [", absl::StrJoin(fetch.logical().shape(), ", "),
          "] has ", piece_bytes, " bytes per piece, more than a message may carry (",
          max_piece_bytes,
          " bytes: half of the smallest --max-message-size of the coordinator and the job's "
          "nodes)"));
    }
    const int64_t fetch_bytes = SaturatingProduct(piece_bytes, pieces_per_fetch);
    job_bytes = fetch_bytes > kMaxBytes - job_bytes ? kMaxBytes : job_bytes + fetch_bytes;
    if (job_bytes > max_job_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "job '", plan.job_name(), "' would stream more than ", max_job_bytes,
          " bytes of fetched tensors (loomd's --max-fetched-bytes) by the time it fetched '",
          fetch.tensor(), "' ", pieces_per_fetch,
          " times (a piece per step and micro-batch): fetch fewer or smaller tensors, or run "
          "fewer steps"));
    }
  }
  return absl::OkStatus();
}

FetchStream::FetchStream(const plan::Plan& plan, PieceCallback on_piece)
    : on_piece_(std::move(on_piece)) {
  for (const plan::Fetch& fetch : plan.fetches()) {
    fetches_.emplace_back(fetch);
    sinks_.insert(sinks_.end(), fetch.sinks().begin(), fetch.sinks().end());
  }
}

absl::Status FetchStream::OnPiece(const SinkPiece& piece) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (FetchPieceAssembler& fetch : fetches_) {
    absl::StatusOr<std::optional<AssembledPiece>> assembled = fetch.Add(piece);
    if (!assembled.ok()) return assembled.status();
    if (!assembled->has_value()) continue;
    const HostTensor& tensor = (*assembled)->tensor;
    v1::FetchedTensor fetched;
    fetched.set_tensor(fetch.fetch().tensor());
    fetched.set_piece((*assembled)->piece);
    fetched.set_data_type(tensor.data_type);
    for (int64_t extent : tensor.shape.dimensions()) fetched.add_shape(extent);
    fetched.set_data(reinterpret_cast<const char*>(tensor.bytes.data()), tensor.bytes.size());
    on_piece_(std::move(fetched));
  }
  return absl::OkStatus();
}

}  // namespace loom::daemon
