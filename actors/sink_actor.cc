#include "actors/sink_actor.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/job_runtime.h"

namespace loom {

SinkActor::~SinkActor() {
  if (charged_bytes_ > 0) init().memory->Release(charged_bytes_, "sink '" + name() + "'");
}

absl::Status SinkActor::DoAct() {
  set_current_piece(InputPiece(0));
  pieces_.resize(num_inputs());
  const SinkPieceCallback* callback = init().sink_piece_callback;
  const bool reports = callback != nullptr && *callback;
  if ((!reports && !init().keep_sink_pieces) || !WorksOn(InputPiece(0))) {
    // Nobody reads the pieces, or the piece is of a step the evaluation skips: nothing to copy.
    for (int i = 0; i < num_inputs(); ++i) ConsumeInput(i);
    return absl::OkStatus();
  }
  for (int i = 0; i < num_inputs(); ++i) {
    TensorView view = InputView(i);
    int64_t bytes = view.ByteSize();
    if (absl::Status status = init().memory->Charge(bytes, "sink '" + name() + "'"); !status.ok()) {
      return status;
    }
    charged_bytes_ += bytes;
    // The stream copies: a memcpy on a CPU stream, a device-to-host copy on a GPU stream.
    absl::StatusOr<HostTensor> tensor = EnqueueCopyToHost(*init().stream, view);
    if (!tensor.ok()) return tensor.status();
    pieces_[i].push_back(std::move(*tensor));
  }
  if (absl::Status status = init().stream->Synchronize(); !status.ok()) return status;
  if (reports) {
    for (int i = 0; i < num_inputs(); ++i) {
      if (absl::Status status = (*callback)(SinkPiece{name(), i, InputPiece(i), pieces_[i].back()});
          !status.ok()) {
        return status;
      }
    }
  }
  if (!init().keep_sink_pieces) {
    for (std::vector<HostTensor>& input : pieces_) input.clear();
    if (charged_bytes_ > 0) init().memory->Release(charged_bytes_, "sink '" + name() + "'");
    charged_bytes_ = 0;
  }
  for (int i = 0; i < num_inputs(); ++i) ConsumeInput(i);
  return absl::OkStatus();
}

absl::StatusOr<const std::vector<std::vector<HostTensor>>*> FetchedPieces(
    const JobRuntime& job, const std::string& sink_name) {
  const auto* sink = dynamic_cast<const SinkActor*>(job.FindActor(sink_name));
  if (sink == nullptr) {
    return absl::NotFoundError(absl::StrCat("the job has no sink task named '", sink_name, "'"));
  }
  return &sink->pieces();
}

}  // namespace loom
