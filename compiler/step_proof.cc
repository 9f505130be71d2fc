#include "compiler/step_proof.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "compiler/parallel_for.h"
#include "core/plan_steps.h"

namespace loom::compiler {
namespace {

// How many stuck tasks the error lists by name before it counts the rest.
constexpr int kListedStuckTasks = 5;
// Runs of waits for data longer than this are told as one link.
constexpr size_t kShownDataLinks = 2;

// A task's place among the readers of one register: how many pieces it has returned.
struct Reader {
  int task = 0;
  int reg = 0;
  int64_t returned = 0;
};

struct Register {
  const plan::RegisterDesc* desc = nullptr;
  int producer = -1;
  int64_t slots = 1;
  int64_t produced = 0;
};

// A task in the game. A RECEIVE plays no part of its own: its SEND writes the RECEIVE's register
// directly (the slots of that register are the credits the RECEIVE grants).
struct Player {
  const plan::Task* task = nullptr;
  int64_t target = 0;  // acts in one step
  int64_t acts = 0;
  int64_t phase = 0;  // UNPACK, REPEAT, ACCUMULATE: acts since the last whole piece
  // Its inputs are readers [first_input, first_input + num_inputs) of TokenGame::readers_, in
  // the task's input order; its outputs outputs_[first_output, first_output + num_outputs).
  int first_input = 0;
  int num_inputs = 0;
  int first_output = 0;
  int num_outputs = 0;
  int collective = -1;  // position in TokenGame::collectives_
};

// One collective of a communicator: the task of each rank, which act together.
struct Collective {
  int communicator = 0;
  std::vector<int> members;  // one task per rank
};

struct Communicator {
  std::string name;
  int size = 0;                  // ranks
  std::vector<int> collectives;  // by sequence; -1 until found
  // The order in which the collectives take turns (positions in TokenGame::collectives_): by
  // sequence, or, while the game chooses the order, as their first acts come; `turn` is a position
  // in it once it is fixed.
  std::vector<int> order;
  bool order_fixed = true;
  int64_t turn = 0;
};

std::string Quoted(absl::string_view name) { return absl::StrCat("'", name, "'"); }

class TokenGame {
 public:
  absl::Status Build(absl::Span<const plan::Plan> plans, int threads);
  // Lets each communicator's collectives take their turns, in the first piece, in the order their
  // ranks become ready; later pieces keep that order. Call before Play.
  void ChooseOrder();
  void Play();
  absl::Status Verdict() const;
  // After a Play that chose the order: each collective task's position in its communicator's
  // order, by task name; empty when the game ended before every communicator's order was fixed.
  absl::flat_hash_map<std::string, int64_t> ChosenSequences() const;

 private:
  struct Wait {
    int from = -1;  // who waits
    int task = -1;  // whom it waits for
    std::string why;
    bool data = false;  // for a register its producer has not written yet
  };
  // The links of a path of waits, with each run of more than kShownDataLinks data waits told
  // as one link ("waits for data from X through N tasks").
  std::string DescribeLinks(absl::Span<const Wait> links) const;

  // The registers a task writes, and the readers of a register (positions in readers_).
  absl::Span<const int> Outputs(int task) const {
    return absl::MakeConstSpan(outputs_).subspan(players_[task].first_output,
                                                 players_[task].num_outputs);
  }
  int Output(int task) const { return outputs_[players_[task].first_output]; }
  int Input(int task) const { return players_[task].first_input; }
  absl::Span<const int> ReadersOf(int reg) const {
    return absl::MakeConstSpan(register_readers_)
        .subspan(first_register_reader_[reg],
                 first_register_reader_[reg + 1] - first_register_reader_[reg]);
  }

  bool Ready(int reader) const {
    return registers_[readers_[reader].reg].produced > readers_[reader].returned;
  }
  // The pieces of `reg` every reader returned.
  int64_t Released(int reg) const;
  bool Free(int reg) const {
    return registers_[reg].produced - Released(reg) < registers_[reg].slots;
  }
  int64_t Factor(int task) const { return std::max(1, players_[task].task->factor()); }
  bool Enabled(int task) const;
  bool CollectiveEnabled(int collective) const;
  void Fire(int task);
  void Produce(int reg);
  void Return(int reader);
  void Push(int task);
  // Fires the collective whose turn it is on `communicator` when all its ranks can act.
  void TryCollective(int communicator);

  // What stuck task `task` waits for, or task -1 when it waits for nothing (it can act).
  Wait WaitOf(int task) const;
  Wait InputWait(int task, int reader) const;
  Wait OutputWait(int task, int reg) const;
  std::string Describe(int task) const;
  // Each task's acts in one step, from the rates of its inputs (Task.pieces_per_step where set
  // must agree; a hand-written plan may leave it unset).
  absl::Status SetTargets();

  std::vector<Player> players_;
  std::vector<Register> registers_;
  std::vector<Reader> readers_;
  std::vector<int> outputs_;
  std::vector<int> register_readers_;       // grouped by register
  std::vector<int> first_register_reader_;  // by register, and one past the last
  std::vector<Collective> collectives_;
  std::vector<Communicator> communicators_;
  std::deque<int> queue_;
  std::vector<bool> queued_;
};

int64_t TokenGame::Released(int reg) const {
  int64_t released = registers_[reg].produced;
  for (int reader : ReadersOf(reg)) released = std::min(released, readers_[reader].returned);
  return released;
}

bool TokenGame::Enabled(int task) const {
  const Player& player = players_[task];
  if (player.acts >= player.target) return false;
  switch (player.task->kind()) {
    case plan::VARIABLE:
      // Act 0 publishes the initial value; act 1 applies gradient 0 in place once every reader
      // returned the value.
      return Free(Output(task)) &&
             (player.acts == 0 || player.num_inputs == 0 || Ready(Input(task)));
    case plan::ACCUMULATE:
      return Ready(Input(task)) && (player.phase + 1 < Factor(task) || Free(Output(task)));
    default:
      for (int reader = player.first_input; reader < player.first_input + player.num_inputs;
           ++reader) {
        if (!Ready(reader)) return false;
      }
      for (int reg : Outputs(task)) {
        if (!Free(reg)) return false;
      }
      return true;
  }
}

void TokenGame::Produce(int reg) {
  ++registers_[reg].produced;
  for (int reader : ReadersOf(reg)) Push(readers_[reader].task);
}

void TokenGame::Return(int reader) {
  ++readers_[reader].returned;
  Push(registers_[readers_[reader].reg].producer);
}

void TokenGame::Fire(int task) {
  Player& player = players_[task];
  switch (player.task->kind()) {
    case plan::VARIABLE:
      // In a game of one step the update is the last act: it publishes nothing.
      if (player.acts == 0) {
        Produce(Output(task));
      } else {
        Return(Input(task));
      }
      break;
    case plan::UNPACK:
    case plan::REPEAT:
      Produce(Output(task));
      if (++player.phase == Factor(task)) {
        player.phase = 0;
        Return(Input(task));
      }
      break;
    case plan::ACCUMULATE:
      Return(Input(task));
      if (++player.phase == Factor(task)) {
        player.phase = 0;
        Produce(Output(task));
      }
      break;
    default:
      for (int reader = player.first_input; reader < player.first_input + player.num_inputs;
           ++reader) {
        Return(reader);
      }
      for (int reg : Outputs(task)) Produce(reg);
      break;
  }
  ++player.acts;
  Push(task);
}

void TokenGame::Push(int task) {
  if (task < 0 || queued_[task]) return;
  queued_[task] = true;
  queue_.push_back(task);
}

bool TokenGame::CollectiveEnabled(int collective) const {
  for (int member : collectives_[collective].members) {
    if (!Enabled(member)) return false;
  }
  return true;
}

void TokenGame::TryCollective(int communicator) {
  Communicator& comm = communicators_[communicator];
  if (!comm.order_fixed) {
    for (int collective : comm.collectives) {
      if (std::find(comm.order.begin(), comm.order.end(), collective) != comm.order.end() ||
          !CollectiveEnabled(collective)) {
        continue;
      }
      for (int member : collectives_[collective].members) Fire(member);
      comm.order.push_back(collective);
    }
    if (comm.order.size() < comm.collectives.size()) return;
    comm.order_fixed = true;
    comm.turn = 0;
    for (int member : collectives_[comm.order[0]].members) Push(member);
    return;
  }
  if (!CollectiveEnabled(comm.order[comm.turn])) return;
  for (int member : collectives_[comm.order[comm.turn]].members) Fire(member);
  comm.turn = (comm.turn + 1) % static_cast<int64_t>(comm.order.size());
  for (int member : collectives_[comm.order[comm.turn]].members) Push(member);
}

void TokenGame::ChooseOrder() {
  for (Communicator& comm : communicators_) {
    comm.order.clear();
    comm.order_fixed = comm.collectives.empty();
  }
}

absl::flat_hash_map<std::string, int64_t> TokenGame::ChosenSequences() const {
  absl::flat_hash_map<std::string, int64_t> sequences;
  for (const Communicator& comm : communicators_) {
    if (!comm.order_fixed) return {};
    for (size_t position = 0; position < comm.order.size(); ++position) {
      for (int member : collectives_[comm.order[position]].members) {
        sequences[players_[member].task->name()] = static_cast<int64_t>(position);
      }
    }
  }
  return sequences;
}

void TokenGame::Play() {
  queued_.assign(players_.size(), false);
  for (int task = 0; task < static_cast<int>(players_.size()); ++task) Push(task);
  while (!queue_.empty()) {
    const int task = queue_.front();
    queue_.pop_front();
    queued_[task] = false;
    if (players_[task].collective >= 0) {
      TryCollective(collectives_[players_[task].collective].communicator);
      continue;
    }
    while (Enabled(task)) Fire(task);
  }
}

absl::Status TokenGame::Build(absl::Span<const plan::Plan> plans, int threads) {
  absl::flat_hash_map<absl::string_view, int> communicator_by_name;
  for (const plan::Plan& plan : plans) {
    for (const plan::Communicator& communicator : plan.communicators()) {
      auto [found, added] = communicator_by_name.emplace(communicator.name(),
                                                         static_cast<int>(communicators_.size()));
      if (!added) continue;
      Communicator& comm = communicators_.emplace_back();
      comm.name = communicator.name();
      comm.size = communicator.devices_size();
      comm.collectives.assign(std::max(0, communicator.num_collectives()), -1);
    }
  }
  int64_t num_tasks = 0;
  int64_t num_registers = 0;
  int64_t num_inputs = 0;
  int64_t num_outputs = 0;
  for (const plan::Plan& plan : plans) {
    num_tasks += plan.tasks_size();
    num_registers += plan.registers_size();
    for (const plan::Task& task : plan.tasks()) {
      num_inputs += task.inputs_size();
      num_outputs += task.outputs_size();
    }
  }
  players_.reserve(num_tasks);
  registers_.reserve(num_registers);
  readers_.reserve(num_inputs);
  outputs_.reserve(num_outputs);
  // A stream's collectives must all be of one communicator (see the header): the communicator of
  // each stream (node, device type, device index, stream kind, stream index) that runs one.
  absl::flat_hash_map<std::tuple<int, int, int, int, int>, int> communicator_of_stream;
  absl::flat_hash_map<std::pair<int, int64_t>, int> collective_of;
  absl::flat_hash_map<absl::string_view, int> receive_by_name;
  for (const plan::Plan& plan : plans) {
    absl::flat_hash_map<absl::string_view, int> register_by_name;
    register_by_name.reserve(plan.registers_size());
    for (const plan::RegisterDesc& desc : plan.registers()) {
      register_by_name.emplace(desc.name(), static_cast<int>(registers_.size()));
      Register& reg = registers_.emplace_back();
      reg.desc = &desc;
      reg.slots = std::max(1, desc.num_slots());
    }
    // The registers each task reads and writes, looked up from `threads` threads (most of the
    // proof's time on a large plan); -1 for a name the plan does not declare.
    const int first_task = static_cast<int>(players_.size());
    for (const plan::Task& task : plan.tasks()) {
      const int position = static_cast<int>(players_.size());
      Player& player = players_.emplace_back();
      player.task = &task;
      player.first_input = static_cast<int>(readers_.size());
      player.num_inputs = task.inputs_size();
      player.first_output = static_cast<int>(outputs_.size());
      player.num_outputs = task.outputs_size();
      readers_.resize(readers_.size() + task.inputs_size(), Reader{position, -1, 0});
      outputs_.resize(outputs_.size() + task.outputs_size(), -1);
    }
    constexpr int kTasksPerChunk = 4096;
    ParallelFor((plan.tasks_size() + kTasksPerChunk - 1) / kTasksPerChunk, threads, [&](int chunk) {
      const int end = std::min(plan.tasks_size(), (chunk + 1) * kTasksPerChunk);
      for (int index = chunk * kTasksPerChunk; index < end; ++index) {
        const plan::Task& task = plan.tasks(index);
        const Player& player = players_[first_task + index];
        for (int i = 0; i < task.inputs_size(); ++i) {
          auto found = register_by_name.find(task.inputs(i));
          if (found != register_by_name.end()) readers_[player.first_input + i].reg = found->second;
        }
        for (int i = 0; i < task.outputs_size(); ++i) {
          auto found = register_by_name.find(task.outputs(i));
          if (found != register_by_name.end()) outputs_[player.first_output + i] = found->second;
        }
      }
    });
    for (int index = 0; index < plan.tasks_size(); ++index) {
      const plan::Task& task = plan.tasks(index);
      const int position = first_task + index;
      Player& player = players_[position];
      for (int i = 0; i < task.inputs_size(); ++i) {
        if (readers_[player.first_input + i].reg < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("task ", Quoted(task.name()), ": no register ", Quoted(task.inputs(i))));
        }
      }
      for (int i = 0; i < task.outputs_size(); ++i) {
        const int reg = outputs_[player.first_output + i];
        if (reg < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "task ", Quoted(task.name()), ": no register ", Quoted(task.outputs(i))));
        }
        if (registers_[reg].producer >= 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("register ", Quoted(task.outputs(i)), " has two producers"));
        }
        registers_[reg].producer = position;
      }
      const bool one_in_one_out = player.num_inputs == 1 && player.num_outputs == 1;
      if ((task.kind() == plan::UNPACK || task.kind() == plan::REPEAT ||
           task.kind() == plan::ACCUMULATE || task.kind() == plan::COLLECTIVE) &&
          !one_in_one_out) {
        return absl::InvalidArgumentError(absl::StrCat("task ", Quoted(task.name()), ": a ",
                                                       plan::TaskKind_Name(task.kind()),
                                                       " task reads one register and writes one"));
      }
      if (task.kind() == plan::VARIABLE && (player.num_outputs != 1 || player.num_inputs > 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("task ", Quoted(task.name()),
                         ": a variable writes one register and reads at most its gradient"));
      }
      if (task.kind() == plan::RECEIVE) {
        if (player.num_outputs != 1) {
          return absl::InvalidArgumentError(
              absl::StrCat("receive task ", Quoted(task.name()), " writes one register"));
        }
        receive_by_name.emplace(task.name(), position);
      }
      if (task.kind() != plan::COLLECTIVE) continue;
      auto communicator = communicator_by_name.find(task.collective().communicator());
      if (communicator == communicator_by_name.end()) {
        return absl::InvalidArgumentError(absl::StrCat("task ", Quoted(task.name()),
                                                       ": no communicator ",
                                                       Quoted(task.collective().communicator())));
      }
      Communicator& comm = communicators_[communicator->second];
      const int64_t sequence = task.collective().sequence();
      if (sequence < 0 || sequence >= static_cast<int64_t>(comm.collectives.size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "task ", Quoted(task.name()), ": sequence ", sequence, " of communicator ",
            Quoted(comm.name), ", which runs ", comm.collectives.size(), " collectives"));
      }
      const plan::Stream& stream = task.stream();
      auto [stream_communicator, added] = communicator_of_stream.emplace(
          std::make_tuple(stream.device().node(), static_cast<int>(stream.device().type()),
                          stream.device().index(), static_cast<int>(stream.kind()), stream.index()),
          communicator->second);
      if (!added && stream_communicator->second != communicator->second) {
        return absl::InvalidArgumentError(
            absl::StrCat("task ", Quoted(task.name()), " runs a collective of communicator ",
                         Quoted(comm.name), " on a stream that also runs communicator ",
                         Quoted(communicators_[stream_communicator->second].name),
                         "'s: a rank blocked in one would keep the other waiting"));
      }
      auto [found, created] = collective_of.emplace(std::make_pair(communicator->second, sequence),
                                                    static_cast<int>(collectives_.size()));
      if (created) {
        Collective& collective = collectives_.emplace_back();
        collective.communicator = communicator->second;
        comm.collectives[sequence] = found->second;
      }
      player.collective = found->second;
      collectives_[found->second].members.push_back(position);
    }
  }
  // A SEND writes its RECEIVE's register: the RECEIVE's slots are the SEND's credits.
  for (int task = 0; task < static_cast<int>(players_.size()); ++task) {
    Player& player = players_[task];
    if (player.task->kind() != plan::SEND) continue;
    auto peer = receive_by_name.find(player.task->peer().task());
    if (peer == receive_by_name.end() || player.num_inputs != 1 || player.num_outputs != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("send task ", Quoted(player.task->name()),
                       ": it must read one register and write none, and its receive task ",
                       Quoted(player.task->peer().task()), " must be among the plans"));
    }
    Player& receive = players_[peer->second];
    const int reg = Output(peer->second);
    registers_[reg].producer = task;
    player.first_output = receive.first_output;
    player.num_outputs = 1;
    receive.num_outputs = 0;
  }
  // The readers of each register, grouped by register.
  first_register_reader_.assign(registers_.size() + 1, 0);
  for (const Reader& reader : readers_) ++first_register_reader_[reader.reg + 1];
  for (size_t reg = 0; reg < registers_.size(); ++reg) {
    first_register_reader_[reg + 1] += first_register_reader_[reg];
  }
  register_readers_.resize(readers_.size());
  std::vector<int> next(first_register_reader_.begin(), first_register_reader_.end() - 1);
  for (int reader = 0; reader < static_cast<int>(readers_.size()); ++reader) {
    register_readers_[next[readers_[reader].reg]++] = reader;
  }
  for (int reg = 0; reg < static_cast<int>(registers_.size()); ++reg) {
    if (registers_[reg].producer < 0 && !ReadersOf(reg).empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "register ", Quoted(registers_[reg].desc->name()), " is read but nothing writes it"));
    }
  }
  for (Communicator& comm : communicators_) {
    for (size_t sequence = 0; sequence < comm.collectives.size(); ++sequence) {
      if (comm.collectives[sequence] < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "communicator ", Quoted(comm.name), " has no collective of sequence ", sequence));
      }
      const Collective& collective = collectives_[comm.collectives[sequence]];
      if (static_cast<int>(collective.members.size()) != comm.size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "collective ", Quoted(players_[collective.members[0]].task->collective().name()),
            " of communicator ", Quoted(comm.name), " has ", collective.members.size(), " of its ",
            comm.size, " ranks among the plans"));
      }
    }
    comm.order = comm.collectives;
  }
  return SetTargets();
}

absl::Status TokenGame::SetTargets() {
  // acts[t]: task t's acts per step (0: not known yet); a register's pieces per step are its
  // producer's acts, divided by the factor of an ACCUMULATE.
  std::vector<int64_t> acts(players_.size(), 0);
  std::deque<int> known;
  auto learn = [&](int task, int64_t count, int from) -> absl::Status {
    const plan::Task& t = *players_[task].task;
    if (acts[task] == 0) {
      if (t.pieces_per_step() > 0 && t.pieces_per_step() != count) {
        return absl::InvalidArgumentError(
            absl::StrCat("task ", Quoted(t.name()), " acts ", t.pieces_per_step(),
                         " times a step (pieces_per_step), but what it reads from ",
                         Quoted(players_[from].task->name()), " makes it act ", count, " times"));
      }
      acts[task] = count;
      known.push_back(task);
    } else if (acts[task] != count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "task ", Quoted(t.name()), " reads registers of different pieces per step: ", acts[task],
          " acts a step by one, ", count, " by what comes from ",
          Quoted(players_[from].task->name())));
    }
    return absl::OkStatus();
  };
  for (int task = 0; task < static_cast<int>(players_.size()); ++task) {
    const plan::Task& t = *players_[task].task;
    if (t.kind() == plan::SOURCE) {
      acts[task] = PiecesPerStep(t);
      known.push_back(task);
    } else if (t.kind() == plan::VARIABLE) {
      acts[task] = 1;
      known.push_back(task);
    }
  }
  while (!known.empty()) {
    const int task = known.front();
    known.pop_front();
    const plan::Task& t = *players_[task].task;
    int64_t pieces = acts[task];
    if (t.kind() == plan::ACCUMULATE) {
      if (pieces % Factor(task) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("accumulate task ", Quoted(t.name()), " sums ", Factor(task),
                         " pieces into one, but acts ", pieces, " times a step"));
      }
      pieces /= Factor(task);
    }
    for (int reg : Outputs(task)) {
      for (int reader : ReadersOf(reg)) {
        const int consumer = readers_[reader].task;
        const plan::Task& c = *players_[consumer].task;
        if (c.kind() == plan::VARIABLE) {
          if (pieces != 1) {
            return absl::InvalidArgumentError(
                absl::StrCat("variable ", Quoted(c.name()), " takes one gradient a step, but ",
                             Quoted(t.name()), " writes ", pieces, " pieces a step"));
          }
          continue;
        }
        const bool repeats = c.kind() == plan::UNPACK || c.kind() == plan::REPEAT;
        if (absl::Status status =
                learn(consumer, repeats ? pieces * Factor(consumer) : pieces, task);
            !status.ok()) {
          return status;
        }
      }
    }
  }
  for (int task = 0; task < static_cast<int>(players_.size()); ++task) {
    Player& player = players_[task];
    switch (player.task->kind()) {
      case plan::VARIABLE:
        player.target = player.num_inputs == 0 ? 1 : 2;
        break;
      case plan::RECEIVE:
        player.target = 0;
        break;
      default:
        // A task no piece reaches (in a cycle without entry) keeps what it says; it cannot act.
        player.target = acts[task] > 0 ? acts[task] : PiecesPerStep(*player.task);
        break;
    }
  }
  return absl::OkStatus();
}

std::string TokenGame::Describe(int task) const {
  const Player& player = players_[task];
  return absl::StrCat(Quoted(player.task->name()), " (", player.acts, " of ", player.target,
                      " acts)");
}

TokenGame::Wait TokenGame::InputWait(int task, int reader) const {
  const Register& reg = registers_[readers_[reader].reg];
  return Wait{task, reg.producer,
              absl::StrCat(Describe(task), " waits for register ", Quoted(reg.desc->name()),
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
        if (!Ready(reader)) return InputWait(task, reader);
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

}  // namespace

absl::Status ProveStepCompletes(absl::Span<const plan::Plan> plans, int threads) {
  TokenGame game;
  if (absl::Status status = game.Build(plans, threads); !status.ok()) return status;
  game.Play();
  return game.Verdict();
}

absl::Status OrderCollectivesToFinish(plan::Plan& plan, int threads) {
  absl::Status proof = ProveStepCompletes(absl::MakeConstSpan(&plan, 1), threads);
  if (proof.ok() || !absl::IsFailedPrecondition(proof)) return proof;
  TokenGame game;
  if (absl::Status status = game.Build(absl::MakeConstSpan(&plan, 1), threads); !status.ok()) {
    return status;
  }
  game.ChooseOrder();
  game.Play();
  const absl::flat_hash_map<std::string, int64_t> sequences = game.ChosenSequences();
  if (sequences.empty()) return proof;
  plan::Plan reordered = plan;
  for (plan::Task& task : *reordered.mutable_tasks()) {
    if (task.kind() == plan::COLLECTIVE) {
      task.mutable_collective()->set_sequence(sequences.at(task.name()));
    }
  }
  if (!ProveStepCompletes(absl::MakeConstSpan(&reordered, 1), threads).ok()) return proof;
  plan = std::move(reordered);
  return absl::OkStatus();
}

}  // namespace loom::compiler
