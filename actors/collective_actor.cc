#include "actors/collective_actor.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/collective_shapes.h"

namespace loom {

absl::Status CollectiveActor::Initialize() {
  if (init().collectives == nullptr || init().collective_turn == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("task '", name(),
                                                      "': no collective backend for communicator '",
                                                      task().collective().communicator(), "'"));
  }
  // Its data input, then its ordering inputs: waited for and returned, never read.
  if (num_inputs() - task().ordering_inputs() != 1 || num_outputs() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("task '", name(), "': a collective reads one register and writes one"));
  }
  absl::Status status = init().collective_turn->AddMember(task().collective().sequence(), id());
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("task '", name(), "': ", status.message()));
  }
  return absl::OkStatus();
}

absl::Status CollectiveActor::DoAct() {
  const int64_t piece = InputPiece(0);
  set_current_piece(piece);
  CollectiveCall call;
  call.rank = task().rank();
  call.conf = &task().collective();
  call.piece = piece;
  call.input = InputView(0);
  call.output = OutputView(0);
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status status = init().collectives->Run(call); !status.ok()) return status;
  if (init().metrics != nullptr) {
    const int64_t nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::steady_clock::now() - start)
                                    .count();
    init().metrics->ObserveCollective(call.conf->kind(), init().collectives->transport(),
                                      nanoseconds, call.input.ByteSize());
  }
  for (int i = 0; i < num_inputs(); ++i) ConsumeInput(i);
  ProduceOutput(0, piece);
  CollectiveTurn& turn = *init().collective_turn;
  if (turn.Advance()) {
    WakeAllMembers();
  } else if (turn.member(turn.current()) != id()) {
    WakeActor(turn.member(turn.current()));
  }
  return absl::OkStatus();
}

absl::Status CollectiveActor::OnExhausted() {
  if (init().collective_turn->MarkExhausted(task().collective().sequence())) WakeAllMembers();
  return absl::OkStatus();
}

void CollectiveActor::WakeAllMembers() {
  for (ActorId member : init().collective_turn->members()) {
    if (member != id()) WakeActor(member);
  }
}

std::string CollectiveActor::DescribeWait() const {
  const CollectiveTurn& turn = *init().collective_turn;
  const int64_t sequence = task().collective().sequence();
  if (!finished() && !turn.ended() && !turn.IsTurnOf(sequence) && Actor::CanAct()) {
    return absl::StrCat("  '", name(), "' waits for its turn on communicator '",
                        turn.communicator(), "': collective ",
                        DescribeCollective(task().collective()), " comes after sequence ",
                        turn.current(), " ('", TaskName(turn.member(turn.current())), "')\n");
  }
  return Actor::DescribeWait();
}

}  // namespace loom
