#include "actors/micro_batch_actors.h"

#include "absl/strings/str_cat.h"

namespace loom {

absl::Status UnpackActor::DoAct() {
  const int32_t factor = task().factor();
  int64_t piece = InputPiece(0) * factor + next_part_;
  set_current_piece(piece);
  if (WorksOn(piece)) {
    TensorView in = InputView(0);
    TensorView out = OutputView(0);
    int64_t part_bytes = out.ByteSize();
    if (absl::Status status = init().stream->Copy(
            out.data, static_cast<const char*>(in.data) + next_part_ * part_bytes, part_bytes);
        !status.ok()) {
      return status;
    }
  }
  ProduceOutput(0, piece);
  if (++next_part_ == factor) {
    next_part_ = 0;
    ConsumeInput(0);
  }
  return absl::OkStatus();
}

absl::Status RepeatActor::DoAct() {
  const int32_t factor = task().factor();
  int64_t piece = InputPiece(0) * factor + emitted_;
  set_current_piece(piece);
  if (WorksOn(piece)) {
    TensorView in = InputView(0);
    if (absl::Status status = init().stream->Copy(OutputView(0).data, in.data, in.ByteSize());
        !status.ok()) {
      return status;
    }
  }
  ProduceOutput(0, piece);
  if (++emitted_ == factor) {
    emitted_ = 0;
    ConsumeInput(0);
  }
  return absl::OkStatus();
}

AccumulateActor::~AccumulateActor() {
  if (sum_ != nullptr) init().memory->Free(sum_);
}

absl::Status AccumulateActor::Initialize() {
  const Register* input = init().inputs[0];
  absl::StatusOr<void*> buffer =
      init().memory->Allocate(input->slot_bytes(), absl::StrCat("accumulator of '", name(), "'"));
  if (!buffer.ok()) return buffer.status();
  sum_ = static_cast<float*>(*buffer);
  return absl::OkStatus();
}

absl::Status AccumulateActor::DoAct() {
  const int32_t factor = task().factor();
  set_current_piece(InputPiece(0));
  TensorView in = InputView(0);
  const int64_t count = in.NumElements();
  StreamContext* stream = init().stream;
  absl::Status status = accumulated_ == 0
                            ? stream->Copy(sum_, in.data, count * int64_t{sizeof(float)})
                            : stream->AddFloat32(sum_, in.Data<float>(), count);
  if (!status.ok()) return status;
  int64_t group = InputPiece(0) / factor;
  ConsumeInput(0);
  if (++accumulated_ == factor) {
    accumulated_ = 0;
    if (status = stream->Copy(OutputView(0).data, sum_, count * int64_t{sizeof(float)});
        !status.ok()) {
      return status;
    }
    ProduceOutput(0, group);
  }
  return absl::OkStatus();
}

absl::Status AccumulateActor::OnExhausted() {
  if (accumulated_ == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("its input ended after ", accumulated_, " of the ", task().factor(),
                   " pieces of a group: the number of pieces is not a multiple of the factor"));
}

}  // namespace loom
