#include "actors/copy_actor.h"

#include "absl/strings/str_cat.h"

namespace loom {

absl::Status CopyActor::Initialize() { return absl::OkStatus(); }

absl::Status CopyActor::DoAct() {
  int64_t piece = InputPiece(0);
  set_current_piece(piece);
  if (!WorksOn(piece)) {
    ConsumeInput(0);
    ProduceOutput(0, piece);
    return absl::OkStatus();
  }
  TensorView in = InputView(0);
  TensorView out = OutputView(0);
  // The stream copies: a memcpy on a CPU stream, an enqueued device copy on a CUDA stream.
  if (absl::Status status = init().stream->Copy(out.data, in.data, in.ByteSize()); !status.ok()) {
    return absl::Status(status.code(), absl::StrCat("task '", name(), "': ", status.message()));
  }
  if (init().metrics != nullptr) {
    // A copy inside the node: the bytes leave one device and enter another.
    init().metrics->AddTransferredBytes("local", TransferDirection::kSent, in.ByteSize());
    init().metrics->AddTransferredBytes("local", TransferDirection::kReceived, in.ByteSize());
  }
  ConsumeInput(0);
  ProduceOutput(0, piece);
  return absl::OkStatus();
}

}  // namespace loom
