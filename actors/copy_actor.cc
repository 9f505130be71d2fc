#include "actors/copy_actor.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/device_name.h"

namespace loom {

absl::Status CopyActor::Initialize() {
  if (init().device_type != plan::CPU) {
    return absl::UnimplementedError(
        absl::StrCat("task '", name(), "': copies on ", DeviceTypeName(init().device_type),
                     " streams need that device backend, which this build does not have"));
  }
  return absl::OkStatus();
}

absl::Status CopyActor::DoAct() {
  int64_t piece = InputPiece(0);
  set_current_piece(piece);
  TensorView in = InputView(0);
  TensorView out = OutputView(0);
  std::memcpy(out.data, in.data, static_cast<size_t>(in.ByteSize()));
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
