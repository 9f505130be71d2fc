#include "compiler/register_lifetimes.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "compiler/parallel_for.h"
#include "core/device_key.h"
#include "core/device_name.h"
#include "core/plan_steps.h"
#include "core/tensor.h"

namespace loom::compiler {
namespace {

// Tick counts in the analysis's tables are small (a few steps of at most kMaxStepTicks ticks, plus
// offsets within a step): int16_t keeps the tables of a stream with thousands of registers small.
// kNever: beyond every bound the analysis uses.
constexpr int16_t kNever = std::numeric_limits<int16_t>::max();
// Steps divided into more ticks than this (more than 64 micro-batches, or rates with a larger
// least common multiple) are not analyzed: no register shares. The analysis's memory grows with
// it (a bit set per task and tick of three steps).
constexpr int64_t kMaxStepTicks = 64;
// A stream whose analysis would take more memory than this shares nothing.
constexpr double kMaxAnalysisBytes = 1 << 29;

int64_t FloorDivide(int64_t a, int64_t b) {
  const int64_t quotient = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? quotient - 1 : quotient;
}
int64_t CeilDivide(int64_t a, int64_t b) { return -FloorDivide(-a, b); }

// How a task's acts touch the pieces of one register: act n touches piece
// floor((n - offset) / ratio). A task acting once per piece has ratio 1; UNPACK and REPEAT read
// their input, and ACCUMULATE writes its output, over `ratio` acts; a VARIABLE reads gradient k
// in act k + 1 (offset 1).
struct Access {
  int64_t ratio = 1;
  int64_t offset = 0;
};

// The first piece whose last act by `access` is act `act` or later.
int64_t PieceAtOrAfter(int64_t act, const Access& access) {
  return std::max<int64_t>(0, CeilDivide(act - access.offset - access.ratio + 1, access.ratio));
}
int64_t FirstAct(int64_t piece, const Access& access) {
  return piece * access.ratio + access.offset;
}
int64_t LastAct(int64_t piece, const Access& access) {
  return piece * access.ratio + access.offset + access.ratio - 1;
}

// An edge of the act graph: the act of `to` that starts `ticks` or more ticks after an act of
// the edge's source starts, starts after it (a bound: the real mapping, rounded up to ticks).
struct Edge {
  int to = 0;
  int64_t ticks = 0;
};

// A task reading a register, and how.
struct Reader {
  int task = 0;
  Access access;
};

// A register of a node plan, with its producer and readers (global task positions).
struct RegisterInfo {
  const plan::RegisterDesc* desc = nullptr;
  int producer = -1;
  Access written;
  int64_t rate = 0;  // pieces per step
  bool accesses_known = true;
  std::vector<Reader> readers;
};

class ActGraph {
 public:
  explicit ActGraph(absl::Span<const plan::Plan> node_plans);

  bool analyzable() const { return step_ticks_ <= kMaxStepTicks; }
  int size() const { return static_cast<int>(tasks_.size()); }
  int64_t step_ticks() const { return step_ticks_; }
  int64_t act_ticks(int task) const { return step_ticks_ / rate_[task]; }
  const plan::Task& task(int position) const { return *tasks_[position]; }
  const std::vector<RegisterInfo>& registers(int plan) const { return registers_[plan]; }

  int device(int task) const { return device_[task]; }
  const std::vector<int>& tasks_on_device(int device) const { return tasks_on_device_[device]; }
  int position_on_device(int task) const { return position_on_device_[task]; }
  const std::vector<Edge>& out(int task) const { return out_[task]; }

 private:
  void AddEdge(int from, int to, const std::function<int64_t(int64_t)>& map);

  std::vector<const plan::Task*> tasks_;
  std::vector<int64_t> rate_;  // pieces per step
  int64_t step_ticks_ = 1;
  std::vector<std::vector<Edge>> out_;
  std::vector<int> device_;  // by task: its device, numbered in order of appearance
  std::vector<std::vector<int>> tasks_on_device_;
  std::vector<int> position_on_device_;               // by task: its position in tasks_on_device_
  std::vector<std::vector<RegisterInfo>> registers_;  // by plan, by register position
};

// How `task` touches a register it reads (`input`) or writes, by its kind: every act touches
// the next piece but for UNPACK and REPEAT reading, and ACCUMULATE writing, one piece in
// `factor` acts, and a VARIABLE reading its gradient a step late.
Access AccessOf(const plan::Task& task, bool input) {
  const int64_t factor = std::max<int64_t>(1, task.factor());
  if (input) {
    if (task.kind() == plan::UNPACK || task.kind() == plan::REPEAT) return Access{factor, 0};
    if (task.kind() == plan::VARIABLE) return Access{1, 1};
  } else if (task.kind() == plan::ACCUMULATE) {
    return Access{factor, 0};
  }
  return Access{1, 0};
}

ActGraph::ActGraph(absl::Span<const plan::Plan> node_plans) {
  std::vector<int> first_task;
  absl::flat_hash_map<absl::string_view, int> task_by_name;
  absl::flat_hash_map<DeviceKey, int> device_number;
  for (const plan::Plan& plan : node_plans) {
    first_task.push_back(static_cast<int>(tasks_.size()));
    for (const plan::Task& task : plan.tasks()) {
      task_by_name.emplace(task.name(), static_cast<int>(tasks_.size()));
      device_.push_back(device_number
                            .emplace(DeviceKey::Of(task.stream().device()),
                                     static_cast<int>(device_number.size()))
                            .first->second);
      if (device_.back() == static_cast<int>(tasks_on_device_.size()))
        tasks_on_device_.emplace_back();
      position_on_device_.push_back(static_cast<int>(tasks_on_device_[device_.back()].size()));
      tasks_on_device_[device_.back()].push_back(static_cast<int>(tasks_.size()));
      tasks_.push_back(&task);
      rate_.push_back(PiecesPerStep(task));
      step_ticks_ = std::lcm(step_ticks_, rate_.back());
      if (step_ticks_ > kMaxStepTicks) return;
    }
  }
  out_.resize(tasks_.size());
  registers_.resize(node_plans.size());
  for (size_t p = 0; p < node_plans.size(); ++p) {
    const plan::Plan& plan = node_plans[p];
    std::vector<RegisterInfo>& registers = registers_[p];
    registers.resize(plan.registers_size());
    absl::flat_hash_map<absl::string_view, int> register_by_name;
    for (int r = 0; r < plan.registers_size(); ++r) {
      registers[r].desc = &plan.registers(r);
      register_by_name.emplace(plan.registers(r).name(), r);
    }
    for (int i = 0; i < plan.tasks_size(); ++i) {
      for (const std::string& output : plan.tasks(i).outputs()) {
        auto found = register_by_name.find(output);
        if (found != register_by_name.end()) registers[found->second].producer = first_task[p] + i;
      }
    }
    // A register's pieces per step: its producer's acts per step over the acts per piece. The
    // tasks' pieces per step must agree with their kinds; where they do not, no edges and no
    // sharing (fewer bounds, never a wrong one).
    for (RegisterInfo& info : registers) {
      if (info.producer < 0) continue;
      info.written = AccessOf(*tasks_[info.producer], false);
      if (rate_[info.producer] % info.written.ratio != 0) {
        info.accesses_known = false;
        continue;
      }
      info.rate = rate_[info.producer] / info.written.ratio;
    }
    for (int i = 0; i < plan.tasks_size(); ++i) {
      const int task = first_task[p] + i;
      for (const std::string& input : plan.tasks(i).inputs()) {
        auto found = register_by_name.find(input);
        if (found == register_by_name.end()) continue;
        RegisterInfo& info = registers[found->second];
        if (info.producer < 0) continue;
        const Access read = AccessOf(plan.tasks(i), true);
        if (!info.accesses_known || rate_[task] != read.ratio * info.rate) {
          info.accesses_known = false;
          continue;
        }
        info.readers.push_back(Reader{task, read});
        const Access written = info.written;
        // Data: the reader's first act on a piece starts after the producer's act that wrote it.
        AddEdge(info.producer, task, [written, read](int64_t act) {
          return FirstAct(PieceAtOrAfter(act, written), read);
        });
        // Credits: the act writing piece q + slots waits for every reader to return piece q
        // (readers return pieces in order, so piece q's slot is the first of the s to be free).
        const int64_t slots = info.desc->num_slots();
        if (slots >= 1) {
          AddEdge(task, info.producer, [written, read, slots](int64_t act) {
            return LastAct(PieceAtOrAfter(act, read) + slots, written);
          });
        }
      }
    }
  }
  // A RECEIVE publishes piece n after its SEND started sending it.
  for (size_t t = 0; t < tasks_.size(); ++t) {
    const plan::Task& receive = *tasks_[t];
    if (receive.kind() != plan::RECEIVE) continue;
    auto send = task_by_name.find(receive.peer().task());
    if (send == task_by_name.end() || rate_[send->second] != rate_[t]) continue;
    AddEdge(send->second, static_cast<int>(t), [](int64_t act) { return act; });
  }
}

void ActGraph::AddEdge(int from, int to, const std::function<int64_t(int64_t)>& map) {
  // The mapping is periodic from the first step on (a step later in the source is a step later
  // in the target); its worst phase over the first two steps bounds every act.
  int64_t ticks = 0;
  for (int64_t act = 0; act < 2 * rate_[from]; ++act) {
    ticks = std::max(ticks, map(act) * act_ticks(to) - act * act_ticks(from));
  }
  out_[from].push_back(Edge{to, ticks});
}

// The least ticks from the end of any act of each of `sources` to the acts of each of `writers`
// that must follow it (sources.size() x writers.size(), kNever beyond `horizon`), over the edges
// among the tasks of `device` (leaving the others out only leaves bounds out). By bit sets of
// writers: reach at level k of task x holds the writers whose acts k ticks or more after x's
// bounded act must follow it; a zero-tick edge needs its target's level k first, so each level
// goes through the tasks in reverse topological order of those edges. Every wait of a piece on
// its own piece would be a cycle of them: a plan that could not run, given no bounds.
std::vector<int16_t> WriterTicks(const ActGraph& graph, int device, const std::vector<int>& sources,
                                 const std::vector<int>& writers, int64_t horizon) {
  std::vector<int16_t> ticks(sources.size() * writers.size(), kNever);
  const std::vector<int>& tasks = graph.tasks_on_device(device);
  const int count = static_cast<int>(tasks.size());
  const size_t words = (writers.size() + 63) / 64;
  const int64_t levels = horizon + 1;
  if (static_cast<double>(levels) * count * words * sizeof(uint64_t) > kMaxAnalysisBytes) {
    return ticks;
  }
  std::vector<int> writer_bit(count, -1);
  for (size_t w = 0; w < writers.size(); ++w) {
    writer_bit[graph.position_on_device(writers[w])] = static_cast<int>(w);
  }
  struct LocalEdge {
    int to = 0;
    int64_t ticks = 0;   // from the end of an act of its source
    int64_t weight = 0;  // from its source's bounded act: up to one act period later
  };
  std::vector<std::vector<LocalEdge>> out(count);
  std::vector<int> zero_weight_in(count, 0);
  for (int x = 0; x < count; ++x) {
    for (const Edge& edge : graph.out(tasks[x])) {
      if (graph.device(edge.to) != device) continue;
      const LocalEdge local{graph.position_on_device(edge.to), edge.ticks,
                            graph.act_ticks(tasks[x]) - 1 + edge.ticks};
      out[x].push_back(local);
      if (local.weight == 0) ++zero_weight_in[local.to];
    }
  }
  std::vector<int> order;
  order.reserve(count);
  for (int x = 0; x < count; ++x) {
    if (zero_weight_in[x] == 0) order.push_back(x);
  }
  for (size_t i = 0; i < order.size(); ++i) {
    for (const LocalEdge& edge : out[order[i]]) {
      if (edge.weight == 0 && --zero_weight_in[edge.to] == 0) order.push_back(edge.to);
    }
  }
  if (static_cast<int>(order.size()) != count) return ticks;
  std::vector<uint64_t> reach(static_cast<size_t>(levels) * count * words, 0);
  auto row = [&](int64_t level, int task) {
    return reach.data() + (static_cast<size_t>(level) * count + task) * words;
  };
  auto merge = [words](uint64_t* into, const uint64_t* from) {
    for (size_t i = 0; i < words; ++i) into[i] |= from[i];
  };
  for (int64_t level = 0; level < levels; ++level) {
    for (auto x = order.rbegin(); x != order.rend(); ++x) {
      uint64_t* target = row(level, *x);
      if (writer_bit[*x] >= 0) target[writer_bit[*x] / 64] |= uint64_t{1} << (writer_bit[*x] % 64);
      if (level > 0) merge(target, row(level - 1, *x));
      for (const LocalEdge& edge : out[*x]) {
        if (edge.weight <= level) merge(target, row(level - edge.weight, edge.to));
      }
    }
  }
  std::vector<uint64_t> seen(words);
  std::vector<uint64_t> now(words);
  for (size_t s = 0; s < sources.size(); ++s) {
    const int source = graph.position_on_device(sources[s]);
    const int64_t next_act = graph.act_ticks(sources[s]);
    std::fill(seen.begin(), seen.end(), 0);
    for (int64_t level = 0; level < levels; ++level) {
      std::fill(now.begin(), now.end(), 0);
      // What its edges bound from the end of its act, and its own next act.
      for (const LocalEdge& edge : out[source]) {
        if (edge.ticks <= level) merge(now.data(), row(level - edge.ticks, edge.to));
      }
      if (next_act <= level) merge(now.data(), row(level - next_act, source));
      for (size_t i = 0; i < words; ++i) {
        for (uint64_t fresh = now[i] & ~seen[i]; fresh != 0; fresh &= fresh - 1) {
          const size_t w = i * 64 + static_cast<size_t>(__builtin_ctzll(fresh));
          ticks[s * writers.size() + w] = static_cast<int16_t>(level);
        }
        seen[i] |= now[i];
      }
    }
  }
  return ticks;
}

bool SharedKind(plan::TaskKind kind, bool producer) {
  switch (kind) {
    case plan::COMPUTE:
    case plan::UNPACK:
    case plan::REPEAT:
    case plan::ACCUMULATE:
    // On CPU devices a collective's Run returns once no peer reads its input or writes its
    // output any more (runtime/collective_backend.h): both are its act's alone.
    case plan::COLLECTIVE:
      return true;
    case plan::SINK:
    case plan::VARIABLE:  // reads its gradient within the act that applies it
      return !producer;
    default:
      return false;
  }
}

std::string StreamKey(const plan::Stream& stream) { return StreamName(stream); }

}  // namespace

RegisterLifetimes RegisterLifetimes::Analyze(absl::Span<const plan::Plan> node_plans, int threads) {
  RegisterLifetimes result;
  const ActGraph graph(node_plans);
  if (!graph.analyzable()) return result;

  // The groups: candidate registers by (plan, stream).
  std::vector<std::vector<std::vector<Reader>>> group_readers;  // by group, by register
  for (size_t p = 0; p < node_plans.size(); ++p) {
    absl::flat_hash_map<std::string, int> group_of_stream;
    const std::vector<RegisterInfo>& registers = graph.registers(static_cast<int>(p));
    for (int r = 0; r < static_cast<int>(registers.size()); ++r) {
      const RegisterInfo& info = registers[r];
      if (info.producer < 0 || !info.accesses_known || info.desc->num_slots() != 1 ||
          !info.desc->pool().empty() || info.desc->host_memory()) {
        continue;
      }
      const plan::Task& producer = graph.task(info.producer);
      if (producer.stream().device().type() != plan::CPU || !SharedKind(producer.kind(), true)) {
        continue;
      }
      // The stream whose pool holds it: that of every task touching it but collectives, which
      // may run beside it on the device's communication streams.
      const plan::Stream* stream =
          producer.kind() == plan::COLLECTIVE ? nullptr : &producer.stream();
      const bool readers_fit =
          std::all_of(info.readers.begin(), info.readers.end(), [&](const Reader& reader) {
            const plan::Task& task = graph.task(reader.task);
            if (!SharedKind(task.kind(), false) ||
                graph.device(reader.task) != graph.device(info.producer)) {
              return false;
            }
            if (task.kind() == plan::COLLECTIVE) return true;
            if (stream == nullptr) stream = &task.stream();
            return SameStream(task.stream(), *stream);
          });
      if (!readers_fit || stream == nullptr) continue;
      const absl::StatusOr<int64_t> bytes =
          CheckedTensorBytes(info.desc->tensor().shape(), info.desc->tensor().data_type());
      if (!bytes.ok() || *bytes <= 0) continue;
      auto [entry, added] =
          group_of_stream.emplace(StreamKey(*stream), static_cast<int>(result.groups_.size()));
      if (added) {
        SharingGroup& group = result.groups_.emplace_back();
        group.plan = static_cast<int>(p);
        group.stream = *stream;
        group_readers.emplace_back();
      }
      SharingGroup& group = result.groups_[entry->second];
      group.registers.push_back(RegisterRef{static_cast<int>(p), r});
      group.slot_bytes.push_back(*bytes);
      // A register nobody reads is returned by the act that wrote it.
      std::vector<Reader> readers = info.readers;
      if (readers.empty()) readers.push_back(Reader{info.producer, info.written});
      group_readers[entry->second].push_back(std::move(readers));
    }
  }

  // Per group: the writers, the searches from every reader, and each register's release bounds.
  const int64_t horizon = 3 * graph.step_ticks();
  result.lifetimes_.resize(result.groups_.size());
  ParallelFor(static_cast<int>(result.groups_.size()), threads, [&](int g) {
    const SharingGroup& group = result.groups_[g];
    const std::vector<RegisterInfo>& registers = graph.registers(group.plan);
    GroupLifetimes& lifetimes = result.lifetimes_[g];
    absl::flat_hash_map<int, int> writer_position;
    std::vector<int> writers;
    for (const RegisterRef& ref : group.registers) {
      const int producer = registers[ref.reg].producer;
      if (writer_position.emplace(producer, static_cast<int>(writers.size())).second) {
        writers.push_back(producer);
      }
    }
    absl::flat_hash_map<int, int> source_position;
    std::vector<int> sources;
    for (const std::vector<Reader>& readers : group_readers[g]) {
      for (const Reader& reader : readers) {
        if (source_position.emplace(reader.task, static_cast<int>(sources.size())).second) {
          sources.push_back(reader.task);
        }
      }
    }
    // ticks[s * writers + w]: from the end of any act of source s to writer w's bounded acts.
    const size_t num_writers = writers.size();
    const std::vector<int16_t> ticks =
        WriterTicks(graph, graph.device(writers[0]), sources, writers, horizon);
    lifetimes.writers = static_cast<int>(num_writers);
    lifetimes.release.assign(group.registers.size() * num_writers, kNever);
    for (size_t r = 0; r < group.registers.size(); ++r) {
      const RegisterInfo& info = registers[group.registers[r].reg];
      Lifetime& lifetime = lifetimes.registers.emplace_back();
      lifetime.piece_ticks = graph.step_ticks() / info.rate;
      lifetime.write_ticks = FirstAct(0, info.written) * graph.act_ticks(info.producer);
      lifetime.writer = writer_position.at(info.producer);
      for (size_t w = 0; w < num_writers; ++w) {
        int64_t release = 0;
        for (const Reader& reader : group_readers[g][r]) {
          const int64_t after = ticks[source_position.at(reader.task) * num_writers + w];
          if (after >= kNever) {
            release = kNever;
            break;
          }
          release =
              std::max(release, LastAct(0, reader.access) * graph.act_ticks(reader.task) + after);
        }
        lifetimes.release[r * num_writers + w] =
            static_cast<int16_t>(std::min<int64_t>(release, kNever));
      }
    }
  });
  return result;
}

bool RegisterLifetimes::Disjoint(int group, int a, int b) const {
  const GroupLifetimes& lifetimes = lifetimes_[group];
  const Lifetime& first = lifetimes.registers[a];
  const Lifetime& second = lifetimes.registers[b];
  const int64_t first_before = lifetimes.release[a * lifetimes.writers + second.writer];
  const int64_t second_before = lifetimes.release[b * lifetimes.writers + first.writer];
  if (first_before >= kNever || second_before >= kNever) return false;
  // With x = m * second.piece_ticks - n * first.piece_ticks: piece n of the first is returned
  // before piece m of the second is written when x >= high, and the other way round when
  // x <= low. x takes every multiple of the periods' gcd; none may lie strictly between.
  const int64_t high = first_before - second.write_ticks;
  const int64_t low = first.write_ticks - second_before;
  const int64_t period = std::gcd(first.piece_ticks, second.piece_ticks);
  return (FloorDivide(low, period) + 1) * period >= high;
}

}  // namespace loom::compiler
