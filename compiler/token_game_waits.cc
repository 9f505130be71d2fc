// TokenGame's account of a step that cannot finish: what each stuck task waits for, and the
// error that names a cycle of waits (compiler/token_game.h).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/token_game.h"

namespace loom::compiler::step_proof_internal {
namespace {

// How many stuck tasks the error lists by name before it counts the rest.
constexpr int kListedStuckTasks = 5;
// Runs of waits for data longer than this are told as one link.
constexpr size_t kShownDataLinks = 2;

}  // namespace

std::string TokenGame::Describe(int task) const {
  const Player& player = players_[task];
  return absl::StrCat(Quoted(player.task->name()), " (", player.acts, " of ", player.target,
                      " acts)");
}

TokenGame::Wait TokenGame::InputWait(int task, int reader) const {
  const Register& reg = registers_[readers_[reader].reg];
  const int32_t lookahead = readers_[reader].lookahead;
  return Wait{task, reg.producer,
              absl::StrCat(Describe(task), " waits for register ", Quoted(reg.desc->name()),
                           lookahead > 0 ? absl::StrCat(" (looking ", lookahead, " pieces ahead)")
                                         : std::string(),
                           " from ", Quoted(players_[reg.producer].task->name())),
              /*data=*/true};
}

TokenGame::Wait TokenGame::OutputWait(int task, int reg) const {
  const Register& r = registers_[reg];
  const int64_t released = Released(reg);
  // The reader still holding the oldest piece.
  int holder = -1;
  for (int reader : ReadersOf(reg)) {
    if (readers_[reader].returned == released) {
      holder = readers_[reader].task;
      break;
    }
  }
  return Wait{
      task, holder,
      absl::StrCat(Describe(task), " waits for a free slot of register ", Quoted(r.desc->name()),
                   " (", r.slots, r.slots == 1 ? " slot" : " slots", "), held by ",
                   holder < 0 ? "nobody" : Quoted(players_[holder].task->name()))};
}

TokenGame::Wait TokenGame::WaitOf(int task) const {
  const Player& player = players_[task];
  if (player.collective >= 0) {
    const Collective& collective = collectives_[player.collective];
    const Communicator& comm = communicators_[collective.communicator];
    if (comm.order[comm.turn] != player.collective) {
      const Collective& current = collectives_[comm.order[comm.turn]];
      // The same rank's task of the collective whose turn it is.
      int before = current.members[0];
      for (int member : current.members) {
        if (players_[member].task->rank() == player.task->rank()) before = member;
      }
      return Wait{
          task, before,
          absl::StrCat(Describe(task), " waits for its turn on communicator ", Quoted(comm.name),
                       " after ", Quoted(players_[before].task->name()))};
    }
    if (Enabled(task)) {
      for (int member : collective.members) {
        if (!Enabled(member)) {
          return Wait{
              task, member,
              absl::StrCat(Describe(task), " waits for rank ", players_[member].task->rank(), " (",
                           Quoted(players_[member].task->name()), ") to join collective ",
                           Quoted(player.task->collective().name()))};
        }
      }
    }
  }
  switch (player.task->kind()) {
    case plan::VARIABLE:
      if (!Free(Output(task))) return OutputWait(task, Output(task));
      return InputWait(task, Input(task));
    case plan::ACCUMULATE:
      if (!Ready(Input(task))) return InputWait(task, Input(task));
      return OutputWait(task, Output(task));
    default:
      for (int reader = player.first_input; reader < player.first_input + player.num_inputs;
           ++reader) {
        if (!Holds(reader)) return InputWait(task, reader);
      }
      for (int reg : Outputs(task)) {
        if (!Free(reg)) return OutputWait(task, reg);
      }
      return Wait{};
  }
}

std::string TokenGame::DescribeLinks(absl::Span<const Wait> links) const {
  std::vector<std::string> described;
  for (size_t i = 0; i < links.size();) {
    size_t end = i;
    while (end < links.size() && links[end].data) ++end;
    if (end - i > kShownDataLinks) {
      described.push_back(absl::StrCat(Describe(links[i].from), " waits for data from ",
                                       Quoted(players_[links[end - 1].task].task->name()),
                                       " through ", end - i - 1, " tasks"));
      i = end;
    } else {
      described.push_back(links[i].why);
      ++i;
    }
  }
  return absl::StrJoin(described, "; ");
}

absl::Status TokenGame::Verdict() const {
  std::vector<int> stuck;
  for (int task = 0; task < static_cast<int>(players_.size()); ++task) {
    if (players_[task].acts < players_[task].target) stuck.push_back(task);
  }
  if (stuck.empty()) return absl::OkStatus();
  std::vector<std::string> listed;
  for (int task : stuck) {
    if (static_cast<int>(listed.size()) == kListedStuckTasks) break;
    listed.push_back(Quoted(players_[task].task->name()));
  }
  std::string message =
      absl::StrCat("the plan cannot finish a step: ", stuck.size(), " of ", players_.size(),
                   " tasks would wait forever (", absl::StrJoin(listed, ", "),
                   stuck.size() > listed.size() ? ", ..." : "", ")");
  // Follow the waits from the first stuck task: they close a cycle, or end at a task that
  // finished its step without producing (or returning) what the last one waits for.
  absl::flat_hash_map<int, int> position_in_path;
  std::vector<Wait> path;
  int task = stuck[0];
  while (true) {
    position_in_path[task] = static_cast<int>(path.size());
    Wait wait = WaitOf(task);
    if (wait.task < 0) {
      absl::StrAppend(&message, "; ", Describe(task), " waits for nothing the game can see");
      break;
    }
    path.push_back(wait);
    auto seen = position_in_path.find(wait.task);
    if (seen != position_in_path.end()) {
      absl::StrAppend(&message, ". A cycle of waits: ",
                      DescribeLinks(absl::MakeConstSpan(path).subspan(seen->second)), "; back to ",
                      Quoted(players_[wait.task].task->name()));
      break;
    }
    if (players_[wait.task].acts >= players_[wait.task].target) {
      absl::StrAppend(&message, ". A chain of waits: ", DescribeLinks(path), "; but ",
                      Describe(wait.task),
                      " finished its step: the tasks' pieces per step do not match");
      break;
    }
    task = wait.task;
  }
  return absl::FailedPreconditionError(message);
}

}  // namespace loom::compiler::step_proof_internal
