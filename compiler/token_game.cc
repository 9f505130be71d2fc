#include "compiler/token_game.h"

#include <algorithm>
#include <numeric>
#include <tuple>
#include <utility>

#include "absl/status/statusor.h"
#include "compiler/parallel_for.h"
#include "core/plan_steps.h"

namespace loom::compiler::step_proof_internal {
namespace {

// The most pieces a step of the game may take per task (the factors of a hand-written plan
// could ask for more).
constexpr int64_t kMaxPiecesPerStep = int64_t{1} << 20;

}  // namespace

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
      // Act 0 publishes the initial value; act k >= 1 applies gradient k - 1 in place once every
      // reader returned the value.
      return Free(Output(task)) &&
             (player.acts == 0 || player.num_inputs == 0 || Ready(Input(task)));
    case plan::ACCUMULATE:
      return Ready(Input(task)) && (player.phase + 1 < Factor(task) || Free(Output(task)));
    default:
      for (int reader = player.first_input; reader < player.first_input + player.num_inputs;
           ++reader) {
        if (!Holds(reader)) return false;
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
      // Act 0 publishes the first value; with a gradient, each later act applies one and
      // publishes the result, except the game's last update, which publishes nothing (as the
      // job's last does).
      if (player.acts > 0 && player.num_inputs > 0) Return(Input(task));
      if (player.acts == 0 || player.num_inputs == 0 || player.acts + 1 < player.target) {
        Produce(Output(task));
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
          if (i < task.input_lookahead_size()) {
            readers_[player.first_input + i].lookahead = task.input_lookahead(i);
          }
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
      // A collective's ordering inputs (Task.ordering_inputs) are inputs of the game.
      const int data_inputs =
          player.num_inputs - (task.kind() == plan::COLLECTIVE ? task.ordering_inputs() : 0);
      const bool one_in_one_out = data_inputs == 1 && player.num_outputs == 1;
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
  // rate[t]: task t's acts per step as a fraction (den 0: not known yet), from the sources'
  // pieces per step and one act of every variable a step; a register's pieces per step are its
  // producer's acts, divided by the factor of an ACCUMULATE. A hand-written plan without
  // pieces_per_step may need several of those steps for every task to act a whole number of
  // times: the game's step is then that many (the least common multiple of the denominators).
  struct Rate {
    int64_t num = 0;
    int64_t den = 0;
    bool operator==(const Rate& other) const = default;
  };
  auto text = [](const Rate& r) {
    return r.den == 1 ? absl::StrCat(r.num) : absl::StrCat(r.num, "/", r.den);
  };
  auto make = [](int64_t num, int64_t den) {
    const int64_t divisor = std::gcd(num, den);
    return Rate{num / divisor, den / divisor};
  };
  std::vector<Rate> rate(players_.size());
  std::deque<int> known;
  auto learn = [&](int task, Rate count, int from) -> absl::Status {
    if (count.num > kMaxPiecesPerStep || count.den > kMaxPiecesPerStep) {
      return absl::InvalidArgumentError(absl::StrCat(
          "task ", Quoted(players_[task].task->name()),
          ": the factors on the way to it make more than ", kMaxPiecesPerStep, " pieces a step"));
    }
    if (rate[task].den == 0) {
      rate[task] = count;
      known.push_back(task);
    } else if (!(rate[task] == count)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "task ", Quoted(players_[task].task->name()),
          " reads registers of different pieces per step: ", text(rate[task]), " a step by one, ",
          text(count), " by what comes from ", Quoted(players_[from].task->name())));
    }
    return absl::OkStatus();
  };
  for (int task = 0; task < static_cast<int>(players_.size()); ++task) {
    const plan::Task& t = *players_[task].task;
    if (t.kind() == plan::SOURCE) {
      rate[task] = Rate{PiecesPerStep(t), 1};
      known.push_back(task);
    } else if (t.kind() == plan::VARIABLE) {
      rate[task] = Rate{1, 1};
      known.push_back(task);
    }
  }
  while (!known.empty()) {
    const int task = known.front();
    known.pop_front();
    const plan::Task& t = *players_[task].task;
    const Rate pieces = t.kind() == plan::ACCUMULATE
                            ? make(rate[task].num, rate[task].den * Factor(task))
                            : rate[task];
    for (int reg : Outputs(task)) {
      for (int reader : ReadersOf(reg)) {
        const int consumer = readers_[reader].task;
        const plan::Task& c = *players_[consumer].task;
        if (c.kind() == plan::VARIABLE) {
          if (!(pieces == Rate{1, 1})) {
            return absl::InvalidArgumentError(
                absl::StrCat("variable ", Quoted(c.name()), " takes one gradient a step, but ",
                             Quoted(t.name()), " writes ", text(pieces), " pieces a step"));
          }
          continue;
        }
        const bool repeats = c.kind() == plan::UNPACK || c.kind() == plan::REPEAT;
        const Rate count = repeats ? make(pieces.num * Factor(consumer), pieces.den) : pieces;
        if (absl::Status status = learn(consumer, count, task); !status.ok()) return status;
      }
    }
  }
  // The plan's steps in one step of the game: every task's acts and every ACCUMULATE's sums
  // whole. A plan that says its pieces per step must need one.
  bool declared = false;
  int64_t steps = 1;
  int fractional = -1;  // a task whose acts or sums are not whole in one step
  for (int task = 0; task < static_cast<int>(players_.size()); ++task) {
    declared = declared || players_[task].task->pieces_per_step() > 0;
    if (rate[task].den == 0) continue;
    int64_t den = rate[task].den;
    if (players_[task].task->kind() == plan::ACCUMULATE) {
      den = make(rate[task].num, rate[task].den * Factor(task)).den;
    }
    if (den > 1 && fractional < 0) fractional = task;
    steps = std::lcm(steps, den);
    if (steps > kMaxPiecesPerStep) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the tasks' factors make no whole step of fewer than ", kMaxPiecesPerStep, " pieces"));
    }
  }
  if (declared && fractional >= 0) {
    const plan::Task& t = *players_[fractional].task;
    return absl::InvalidArgumentError(
        t.kind() == plan::ACCUMULATE
            ? absl::StrCat("accumulate task ", Quoted(t.name()), " sums ", Factor(fractional),
                           " pieces into one, but acts ", text(rate[fractional]), " times a step")
            : absl::StrCat("task ", Quoted(t.name()), " acts ", text(rate[fractional]),
                           " times a step"));
  }
  for (int task = 0; task < static_cast<int>(players_.size()); ++task) {
    Player& player = players_[task];
    const plan::Task& t = *player.task;
    const int64_t acts = rate[task].den > 0 ? rate[task].num * (steps / rate[task].den) : 0;
    if (acts > 0 && t.pieces_per_step() > 0 && t.pieces_per_step() != acts &&
        t.kind() != plan::SOURCE) {
      return absl::InvalidArgumentError(absl::StrCat(
          "task ", Quoted(t.name()), " acts ", t.pieces_per_step(),
          " times a step (pieces_per_step), but what it reads makes it act ", acts, " times"));
    }
    switch (t.kind()) {
      case plan::VARIABLE:
        // Publish, then update (and publish again but after the last update) every step.
        player.target = player.num_inputs == 0 ? steps : steps + 1;
        break;
      case plan::RECEIVE:
        player.target = 0;
        break;
      default:
        // A task no piece reaches (in a cycle without entry) keeps what it says; it cannot act.
        player.target = acts > 0 ? acts : PiecesPerStep(t);
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler::step_proof_internal
