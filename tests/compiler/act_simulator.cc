#include "tests/compiler/act_simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <numeric>
#include <random>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/tensor.h"

namespace loom::compiler::testing {
namespace {

// A piece of a register that some reader has not returned yet.
struct Outstanding {
  int64_t piece = 0;
  int remaining = 0;
};

struct SimRegister {
  const plan::RegisterDesc* desc = nullptr;
  int producer = -1;                         // global task position
  std::vector<std::pair<int, int>> readers;  // (global task position, input position)
  std::deque<Outstanding> live;
  int64_t reserved = 0;  // RECEIVE registers: slots a SEND filled that are not published yet
  int64_t published = 0;
  int pool = -1;  // position in Simulator::pools_, or -1
  int64_t begin = 0;
  int64_t end = 0;

  int64_t slots() const { return std::max(1, desc->num_slots()); }
  bool Free() const { return static_cast<int64_t>(live.size()) + reserved < slots(); }
};

struct SimTask {
  const plan::Task* task = nullptr;
  std::vector<int> inputs;                 // global register positions
  std::vector<int> outputs;                // global register positions
  std::vector<std::deque<int64_t>> ready;  // by input: pieces published and not yet returned
  int64_t acts = 0;
  int64_t part = 0;  // UNPACK / REPEAT: outputs emitted of the front input; ACCUMULATE: summed
  int peer = -1;     // SEND: its RECEIVE; RECEIVE: its SEND
  std::deque<int64_t> in_flight;  // RECEIVE: pieces its SEND moved, not yet published
  uint64_t priority = 0;
  double weight = 1;

  plan::TaskKind kind() const { return task->kind(); }
  int64_t factor() const { return std::max(1, task->factor()); }
  bool has_gradient() const { return task->kind() == plan::VARIABLE && inputs.size() == 1; }
  int64_t total_acts() const {
    switch (task->kind()) {
      case plan::SOURCE:
        return task->num_pieces();
      case plan::VARIABLE:
        return has_gradient() && task->num_pieces() > 0 ? task->num_pieces() + 1
                                                        : task->num_pieces();
      default:
        return -1;  // acts while it has input
    }
  }
};

struct Pool {
  std::string name;
  int plan = 0;
  std::vector<int> members;  // global register positions
};

class Simulator {
 public:
  absl::Status Build(absl::Span<const plan::Plan> node_plans);
  SimulationResult Run(const SimulationOptions& options);

 private:
  bool AllInputsReady(const SimTask& task) const;
  bool AllOutputsFree(const SimTask& task) const;
  bool CanAct(int t) const;
  void Refresh(int t);
  int Choose(SchedulePolicy policy, std::mt19937_64& random) const;
  void Act(int t, const SimulationOptions& options, SimulationResult& result);
  void CheckWrite(int t, int written, const std::vector<int>& same_act,
                  const SimulationOptions& options, SimulationResult& result);
  std::string Holders(int reg, int64_t piece) const;
  std::string Name(int reg) const { return registers_[reg].desc->name(); }
  std::string WaitOf(int t) const;
  bool Complete(int t) const;

  std::vector<SimRegister> registers_;
  std::vector<SimTask> tasks_;
  std::vector<Pool> pools_;
  std::vector<int> enabled_;
  std::vector<int> enabled_position_;       // by task: its position in enabled_, or -1
  std::set<std::pair<int, int>> overlaps_;  // (register written, register live)
};

absl::Status Simulator::Build(absl::Span<const plan::Plan> node_plans) {
  absl::flat_hash_map<std::string, int> task_by_name;
  for (size_t p = 0; p < node_plans.size(); ++p) {
    const plan::Plan& plan = node_plans[p];
    const int first_register = static_cast<int>(registers_.size());
    absl::flat_hash_map<std::string, int> register_by_name;
    absl::flat_hash_map<std::string, int> pool_by_name;
    for (int r = 0; r < plan.registers_size(); ++r) {
      const plan::RegisterDesc& desc = plan.registers(r);
      const int position = first_register + r;
      if (!register_by_name.emplace(desc.name(), position).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan ", p, " declares register '", desc.name(), "' twice"));
      }
      SimRegister& reg = registers_.emplace_back();
      reg.desc = &desc;
      if (desc.pool().empty()) continue;
      const absl::StatusOr<int64_t> bytes =
          CheckedTensorBytes(desc.tensor().shape(), desc.tensor().data_type());
      if (!bytes.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("pooled register '", desc.name(), "': ", bytes.status().message()));
      }
      auto [entry, added] = pool_by_name.emplace(desc.pool(), static_cast<int>(pools_.size()));
      if (added) pools_.push_back(Pool{desc.pool(), static_cast<int>(p), {}});
      pools_[entry->second].members.push_back(position);
      reg.pool = entry->second;
      reg.begin = desc.pool_offset();
      reg.end = desc.pool_offset() + *bytes * reg.slots();
    }
    for (const plan::Task& task : plan.tasks()) {
      const int t = static_cast<int>(tasks_.size());
      if (!task_by_name.emplace(task.name(), t).second) {
        return absl::InvalidArgumentError(absl::StrCat("task '", task.name(), "' appears twice"));
      }
      SimTask& sim = tasks_.emplace_back();
      sim.task = &task;
      for (int i = 0; i < task.inputs_size(); ++i) {
        auto found = register_by_name.find(task.inputs(i));
        if (found == register_by_name.end()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "task '", task.name(), "' reads undeclared register '", task.inputs(i), "'"));
        }
        sim.inputs.push_back(found->second);
        registers_[found->second].readers.emplace_back(t, i);
      }
      sim.ready.resize(sim.inputs.size());
      for (const std::string& output : task.outputs()) {
        auto found = register_by_name.find(output);
        if (found == register_by_name.end()) {
          return absl::InvalidArgumentError(
              absl::StrCat("task '", task.name(), "' writes undeclared register '", output, "'"));
        }
        if (registers_[found->second].producer >= 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("register '", output, "' has two producers"));
        }
        registers_[found->second].producer = t;
        sim.outputs.push_back(found->second);
      }
    }
  }
  for (size_t t = 0; t < tasks_.size(); ++t) {
    SimTask& send = tasks_[t];
    if (send.kind() != plan::SEND) continue;
    auto found = task_by_name.find(send.task->peer().task());
    if (found == task_by_name.end() || tasks_[found->second].kind() != plan::RECEIVE ||
        tasks_[found->second].outputs.size() != 1 || send.inputs.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("send task '", send.task->name(), "' has no RECEIVE peer with one output"));
    }
    send.peer = found->second;
    tasks_[found->second].peer = static_cast<int>(t);
  }
  for (const SimTask& task : tasks_) {
    if (task.kind() == plan::RECEIVE && task.peer < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("receive task '", task.task->name(), "' has no SEND peer"));
    }
  }
  enabled_position_.assign(tasks_.size(), -1);
  return absl::OkStatus();
}

bool Simulator::AllInputsReady(const SimTask& task) const {
  for (size_t i = 0; i < task.ready.size(); ++i) {
    const std::deque<int64_t>& ready = task.ready[i];
    if (ready.empty()) return false;
    // Task.input_lookahead: also the pieces after the front one, up to k or to its step's end.
    const int32_t lookahead = static_cast<int>(i) < task.task->input_lookahead_size()
                                  ? task.task->input_lookahead(static_cast<int>(i))
                                  : 0;
    if (lookahead <= 0) continue;
    const int64_t per_step = std::max(1, task.task->pieces_per_step());
    const int64_t left_in_step = per_step - 1 - ready.front() % per_step;
    if (static_cast<int64_t>(ready.size()) < std::min<int64_t>(lookahead, left_in_step) + 1) {
      return false;
    }
  }
  return true;
}

bool Simulator::AllOutputsFree(const SimTask& task) const {
  return std::all_of(task.outputs.begin(), task.outputs.end(),
                     [&](int reg) { return registers_[reg].Free(); });
}

bool Simulator::CanAct(int t) const {
  const SimTask& task = tasks_[t];
  switch (task.kind()) {
    case plan::SOURCE:
      return task.acts < task.total_acts() && AllOutputsFree(task);
    case plan::VARIABLE:
      // The value is updated in place: every act needs its slot back.
      return task.acts < task.total_acts() && AllOutputsFree(task) &&
             (task.acts == 0 || !task.has_gradient() || !task.ready[0].empty());
    case plan::ACCUMULATE:
      // The output slot is needed only by the act that writes the sum.
      return AllInputsReady(task) && (task.part + 1 < task.factor() || AllOutputsFree(task));
    case plan::SEND:
      return !task.ready[0].empty() && registers_[tasks_[task.peer].outputs[0]].Free();
    case plan::RECEIVE:
      return !task.in_flight.empty();
    default:
      // COMPUTE, COPY, COLLECTIVE (its rank alone), SINK, UNPACK, REPEAT.
      return AllInputsReady(task) && AllOutputsFree(task);
  }
}

void Simulator::Refresh(int t) {
  const bool can = CanAct(t);
  int& position = enabled_position_[t];
  if (can && position < 0) {
    position = static_cast<int>(enabled_.size());
    enabled_.push_back(t);
  } else if (!can && position >= 0) {
    const int last = enabled_.back();
    enabled_[position] = last;
    enabled_position_[last] = position;
    enabled_.pop_back();
    position = -1;
  }
}

int Simulator::Choose(SchedulePolicy policy, std::mt19937_64& random) const {
  switch (policy) {
    case SchedulePolicy::kPriorities:
      return *std::max_element(enabled_.begin(), enabled_.end(), [&](int a, int b) {
        return tasks_[a].priority < tasks_[b].priority;
      });
    case SchedulePolicy::kWeighted: {
      double total = 0;
      for (int t : enabled_) total += tasks_[t].weight;
      double pick = std::uniform_real_distribution<double>(0, total)(random);
      for (int t : enabled_) {
        pick -= tasks_[t].weight;
        if (pick < 0) return t;
      }
      return enabled_.back();
    }
    case SchedulePolicy::kUniform:
    default:
      return enabled_[std::uniform_int_distribution<size_t>(0, enabled_.size() - 1)(random)];
  }
}

std::string Simulator::Holders(int reg, int64_t piece) const {
  std::vector<std::string> holders;
  for (const auto& [task, input] : registers_[reg].readers) {
    const std::deque<int64_t>& ready = tasks_[task].ready[input];
    if (std::find(ready.begin(), ready.end(), piece) != ready.end()) {
      holders.push_back(absl::StrCat("'", tasks_[task].task->name(), "'"));
    }
  }
  return absl::StrJoin(holders, ", ");
}

void Simulator::CheckWrite(int t, int written, const std::vector<int>& same_act,
                           const SimulationOptions& options, SimulationResult& result) {
  const SimRegister& reg = registers_[written];
  const Pool& pool = pools_[reg.pool];
  const SimTask& task = tasks_[t];
  for (int other : pool.members) {
    if (other == written) continue;
    const SimRegister& candidate = registers_[other];
    if (candidate.begin >= reg.end || reg.begin >= candidate.end) continue;
    const bool live = !candidate.live.empty();
    if (!live && std::find(same_act.begin(), same_act.end(), other) == same_act.end()) continue;
    ++result.violation_count;
    overlaps_.emplace(written, other);
    if (static_cast<int>(result.violations.size()) >= options.max_described_violations) continue;
    std::string why;
    if (live) {
      const int64_t piece = candidate.live.front().piece;
      why = absl::StrCat("piece ", piece, " of '", Name(other), "' is live (not yet returned by ",
                         Holders(other, piece), ")");
    } else {
      why = absl::StrCat("the same act writes piece ", candidate.published, " of '", Name(other),
                         "'");
    }
    result.violations.push_back(absl::StrCat(
        "act ", task.acts, " of '", task.task->name(), "' writes piece ", reg.published, " of '",
        Name(written), "' (bytes [", reg.begin, ", ", reg.end, ") of pool '", pool.name,
        "') while ", why, " at bytes [", candidate.begin, ", ", candidate.end, ")"));
  }
}

void Simulator::Act(int t, const SimulationOptions& options, SimulationResult& result) {
  SimTask& task = tasks_[t];
  std::vector<int> written;
  std::vector<int> consumed;  // input positions returned at the end of the act
  std::vector<int> all_inputs(task.inputs.size());
  std::iota(all_inputs.begin(), all_inputs.end(), 0);
  switch (task.kind()) {
    case plan::UNPACK:
    case plan::REPEAT:
      // `factor` outputs per input piece; the input is returned after the last.
      written = task.outputs;
      if (++task.part >= task.factor()) {
        task.part = 0;
        consumed = all_inputs;
      }
      break;
    case plan::ACCUMULATE:
      // Every input is returned; the output is written after `factor` of them.
      consumed = all_inputs;
      if (++task.part >= task.factor()) {
        task.part = 0;
        written = task.outputs;
      }
      break;
    case plan::VARIABLE:
      // Act 0 publishes value 0; act k + 1 takes gradient k and publishes value k + 1 but after
      // the last step.
      if (task.acts > 0 && task.has_gradient()) consumed = all_inputs;
      if (task.acts < task.task->num_pieces()) written = task.outputs;
      break;
    case plan::SINK:
      consumed = all_inputs;
      break;
    case plan::SEND: {
      consumed = all_inputs;
      SimTask& receive = tasks_[task.peer];
      ++registers_[receive.outputs[0]].reserved;
      receive.in_flight.push_back(task.ready[0].front());
      break;
    }
    case plan::RECEIVE:
      --registers_[task.outputs[0]].reserved;
      task.in_flight.pop_front();
      written = task.outputs;
      break;
    default:
      // SOURCE, COMPUTE, COPY, COLLECTIVE.
      written = task.outputs;
      consumed = all_inputs;
      break;
  }
  for (int reg : written) {
    if (registers_[reg].pool < 0) continue;
    ++result.pooled_writes;
    CheckWrite(t, reg, written, options, result);
  }
  std::vector<int> touched = {t};
  for (int reg : written) {
    SimRegister& output = registers_[reg];
    const int64_t piece = output.published++;
    if (output.readers.empty()) continue;  // returned by the act that wrote it
    output.live.push_back(Outstanding{piece, static_cast<int>(output.readers.size())});
    for (const auto& [reader, input] : output.readers) {
      tasks_[reader].ready[input].push_back(piece);
      touched.push_back(reader);
    }
  }
  for (int input : consumed) {
    const int64_t piece = task.ready[input].front();
    task.ready[input].pop_front();
    SimRegister& reg = registers_[task.inputs[input]];
    auto found = std::find_if(reg.live.begin(), reg.live.end(),
                              [piece](const Outstanding& live) { return live.piece == piece; });
    if (found != reg.live.end() && --found->remaining == 0) reg.live.erase(found);
    if (reg.producer >= 0) {
      touched.push_back(reg.producer);
      if (tasks_[reg.producer].peer >= 0) touched.push_back(tasks_[reg.producer].peer);
    }
  }
  if (task.peer >= 0) touched.push_back(task.peer);
  ++task.acts;
  ++result.acts;
  for (int other : touched) Refresh(other);
}

bool Simulator::Complete(int t) const {
  const SimTask& task = tasks_[t];
  if (task.total_acts() >= 0 && task.acts < task.total_acts()) return false;
  if (task.part != 0 || !task.in_flight.empty()) return false;
  return std::all_of(task.ready.begin(), task.ready.end(),
                     [](const std::deque<int64_t>& ready) { return ready.empty(); });
}

std::string Simulator::WaitOf(int t) const {
  const SimTask& task = tasks_[t];
  std::vector<std::string> waits;
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    if (task.ready[i].empty())
      waits.push_back(absl::StrCat("a piece of '", Name(task.inputs[i]), "'"));
  }
  for (int reg : task.outputs) {
    const SimRegister& output = registers_[reg];
    if (output.Free()) continue;
    std::string held;
    if (!output.live.empty()) {
      const int64_t piece = output.live.front().piece;
      held = absl::StrCat(" (piece ", piece, " held by ", Holders(reg, piece), ")");
    }
    waits.push_back(absl::StrCat("a free slot of '", Name(reg), "'", held));
  }
  return absl::StrCat("'", task.task->name(), "' after ", task.acts, " acts waits for ",
                      waits.empty() ? "nothing it can name" : absl::StrJoin(waits, " and "));
}

SimulationResult Simulator::Run(const SimulationOptions& options) {
  SimulationResult result;
  std::mt19937_64 random(options.seed);
  std::vector<uint64_t> priorities(tasks_.size());
  std::iota(priorities.begin(), priorities.end(), 0);
  std::shuffle(priorities.begin(), priorities.end(), random);
  std::uniform_real_distribution<double> exponent(0, 10);
  for (size_t t = 0; t < tasks_.size(); ++t) {
    tasks_[t].priority = priorities[t];
    tasks_[t].weight = std::exp2(exponent(random));
  }
  for (size_t t = 0; t < tasks_.size(); ++t) Refresh(static_cast<int>(t));
  while (!enabled_.empty() && result.acts < options.max_acts) {
    Act(Choose(options.policy, random), options, result);
  }
  for (const auto& [written, live] : overlaps_) {
    result.overlaps.emplace(pools_[registers_[written].pool].plan, Name(written), Name(live));
  }
  if (!enabled_.empty()) return result;  // stopped at max_acts
  std::vector<std::string> stuck;
  for (size_t t = 0; t < tasks_.size(); ++t) {
    if (Complete(static_cast<int>(t))) continue;
    if (stuck.size() < 8) stuck.push_back(WaitOf(static_cast<int>(t)));
  }
  result.deadlocked = !stuck.empty();
  result.finished = stuck.empty();
  result.deadlock = absl::StrJoin(stuck, "; ");
  return result;
}

}  // namespace

SchedulePolicy PolicyOfSeed(uint64_t seed) {
  switch (seed % 3) {
    case 0:
      return SchedulePolicy::kUniform;
    case 1:
      return SchedulePolicy::kPriorities;
    default:
      return SchedulePolicy::kWeighted;
  }
}

absl::StatusOr<SimulationResult> SimulateActs(absl::Span<const plan::Plan> node_plans,
                                              const SimulationOptions& options) {
  Simulator simulator;
  if (absl::Status status = simulator.Build(node_plans); !status.ok()) return status;
  return simulator.Run(options);
}

}  // namespace loom::compiler::testing
