#include "compiler/act_order.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "compiler/kernel_attributes.h"
#include "core/device_key.h"
#include "core/device_name.h"
#include "core/plan_steps.h"

namespace loom::compiler {
namespace {

// The op a task lowers (its name up to the rank), or the name of a task of no op.
absl::string_view OpOfTask(const plan::Task& task) {
  const absl::string_view name = task.name();
  return name.substr(0, name.rfind('@'));
}

// The tasks of one device, as positions in the plan.
struct DeviceTasks {
  plan::Device device;
  std::vector<int> tasks;
  int64_t micro_batches = 1;  // the most pieces a task of the device has a step
  // A pipeline stage under micro-batches (one-forward-one-backward or GPipe): its chains may read
  // the other stages' data, and the forward and the backward get a chain each, but on 1F1B's
  // last stage, which runs a micro-batch's backward before the next forward (one chain).
  bool pipeline_stage = false;
  bool forward_and_backward_apart = false;
};

class ActOrder {
 public:
  ActOrder(const job::Job& job, plan::Plan& plan) : plan_(plan) {
    for (int i = 0; i < job.ops_size(); ++i) {
      op_order_.emplace(job.ops(i).name(), i);
      if (job.ops(i).backward()) backward_ops_.insert(job.ops(i).name());
    }
    for (int t = 0; t < plan_.tasks_size(); ++t) {
      for (const std::string& output : plan_.tasks(t).outputs()) producer_.emplace(output, t);
      for (const std::string& input : plan_.tasks(t).inputs()) readers_[input].push_back(t);
    }
    for (int r = 0; r < plan_.registers_size(); ++r) {
      register_position_.emplace(plan_.registers(r).name(), r);
    }
    flags_.resize(plan_.tasks_size());
    backward_.assign(plan_.tasks_size(), -1);
  }

  void OrderDevice(const DeviceTasks& device_tasks);

 private:
  // The producer of `input` on the device (plan position), or -1.
  int LocalProducer(const std::string& input, const plan::Device& device) const;
  // The device's tasks in an order where producers come first (a VARIABLE's gradient is read a
  // step late: no order), the earliest op of the job first among the ready ones; tasks that are
  // no op's (boxing, buckets) go with the op they read. Empty for a cyclic plan (which validation
  // names).
  std::vector<int> DataOrder(const DeviceTasks& device_tasks) const;
  void AddOrderingInput(int task, const std::string& reg);
  // Collectives between a stream's chain and the step's start or end, ordered into the chain so
  // that the registers they write or read live briefly: a gather of what the step starts from
  // (ZeRO's all-gathers of the variables' shards) acts once the chain reaches the use before
  // its first (one use ahead), or at the step's start (starts_step) when that is the chain's
  // first; a reduce-scatter of a chained task's output (ZeRO's gradients) must have acted
  // before the chained task that writes the next one. Only collectives that act as often as the
  // chains (`micro_batches` times a step). Whether it added an order.
  bool OrderCollectives(const std::vector<int>& order, int64_t micro_batches);
  // Under micro-batches, micro-batch n + 1's chain after n's: each chain's last task reads its
  // first task's first output (as an ordering input), which gets one slot, so the first task's
  // next act waits until the last has read (and returned) the piece before. The first task whose
  // first output only its chain reads, that is (on a pipeline stage a stash keeps its slots).
  void ChainMicroBatches(const std::vector<int>& order);
  // The step barrier of `device`: reads `values` (the trained variables'), gates `gated`.
  // Under micro-batches the token (once a step) is repeated to the tasks that act per micro-batch
  // (`micro_batches` times a step): only the step's first micro-batch waits for it.
  void AddBarrier(const plan::Device& device, const std::vector<std::string>& values,
                  const std::vector<int>& gated, int64_t micro_batches);
  // With the barrier in place: one slot for each register of the device that holds two only to
  // let step n + 1's piece be written while step n's is read, where the order already forbids
  // that (its writer follows the barrier, and each reader feeds an update of the step).
  void DropCrossStepSlots(const std::vector<int>& order, const DeviceKey& device);

  // Whether `task` is a backward op's, or (a task of no op: boxing, a transfer) computed from one,
  // on any device.
  bool Backward(int task);
  // The chain `task` belongs to: its stream's, or on a pipeline stage its stream's forward or
  // backward one.
  std::string ChainOf(int task) const {
    const std::string stream = StreamName(plan_.tasks(task).stream());
    return flags_[task].backward ? absl::StrCat(stream, "|backward") : stream;
  }

  plan::Plan& plan_;
  absl::flat_hash_map<std::string, int> op_order_;
  absl::flat_hash_set<std::string> backward_ops_;
  std::vector<int8_t> backward_;  // Backward's answers: -1 not known yet
  absl::flat_hash_map<std::string, int> producer_;
  absl::flat_hash_map<std::string, std::vector<int>> readers_;  // register -> tasks
  absl::flat_hash_map<std::string, int> register_position_;
  // What OrderDevice found of each task of the device it orders (reset after each device, so
  // that a job of many devices does not clear a plan-wide table per device).
  struct TaskFlags {
    bool chained = false;       // in its stream's chain
    bool step_start = false;    // computed from the step's start alone
    bool follows = false;       // acts after a gated task within the step
    bool feeds_update = false;  // precedes an update of the step
    int chain_position = -1;    // in its chain
    bool backward = false;      // on a pipeline stage: a backward op's, or computed from one
    bool starts_step = false;   // a collective the step barrier gates
  };
  std::vector<TaskFlags> flags_;
};

bool ActOrder::Backward(int task) {
  if (backward_[task] >= 0) return backward_[task] == 1;
  const plan::Task& described = plan_.tasks(task);
  const absl::string_view op = OpOfTask(described);
  bool backward = backward_ops_.contains(op);
  if (!op_order_.contains(op) && described.kind() != plan::VARIABLE) {
    backward_[task] = 0;  // (no cycle through tasks of no op; a VARIABLE starts the step)
    for (const std::string& input : described.inputs()) {
      auto found = producer_.find(input);
      if (found != producer_.end() && Backward(found->second)) backward = true;
    }
  }
  backward_[task] = backward ? 1 : 0;
  return backward;
}

int ActOrder::LocalProducer(const std::string& input, const plan::Device& device) const {
  auto found = producer_.find(input);
  if (found == producer_.end()) return -1;
  return DeviceKey::Of(plan_.tasks(found->second).stream().device()) == DeviceKey::Of(device)
             ? found->second
             : -1;
}

std::vector<int> ActOrder::DataOrder(const DeviceTasks& device_tasks) const {
  absl::flat_hash_map<int, int> position;  // plan position -> position in device_tasks.tasks
  const int count = static_cast<int>(device_tasks.tasks.size());
  for (int i = 0; i < count; ++i) position.emplace(device_tasks.tasks[i], i);
  std::vector<int> waiting(count, 0);
  std::vector<std::vector<int>> readers(count);
  std::vector<int64_t> key(count, -1);
  for (int i = 0; i < count; ++i) {
    const plan::Task& task = plan_.tasks(device_tasks.tasks[i]);
    if (auto found = op_order_.find(OpOfTask(task)); found != op_order_.end()) {
      key[i] = found->second;
    }
    if (task.kind() == plan::VARIABLE) continue;
    for (const std::string& input : task.inputs()) {
      const int from = LocalProducer(input, device_tasks.device);
      if (from < 0) continue;
      readers[position.at(from)].push_back(i);
      ++waiting[i];
    }
  }
  // What no op computes from a gather of the step's start (the unpack of ZeRO's parameter bucket)
  // goes with the first op that reads it, so that the gather can act one use ahead of it
  // (OrderCollectives) rather than before the first op of the step.
  std::vector<int> after_gather;
  for (int i = 0; i < count; ++i) {
    const plan::Task& task = plan_.tasks(device_tasks.tasks[i]);
    if (key[i] >= 0 || task.kind() != plan::COMPUTE) continue;
    for (const std::string& input : task.inputs()) {
      const int from = LocalProducer(input, device_tasks.device);
      if (from >= 0 && plan_.tasks(from).kind() == plan::COLLECTIVE &&
          plan_.tasks(from).collective().kind() == plan::ALL_GATHER) {
        after_gather.push_back(i);
        break;
      }
    }
  }
  if (!after_gather.empty()) {
    std::vector<int> topological;  // any order where producers come first
    std::vector<int> unmet = waiting;
    for (int i = 0; i < count; ++i) {
      if (unmet[i] == 0) topological.push_back(i);
    }
    for (size_t next = 0; next < topological.size(); ++next) {
      for (int reader : readers[topological[next]]) {
        if (--unmet[reader] == 0) topological.push_back(reader);
      }
    }
    std::vector<int64_t> first_reader(key);  // the least key of a task or what reads it
    for (auto i = topological.rbegin(); i != topological.rend(); ++i) {
      if (first_reader[*i] >= 0) continue;
      for (int reader : readers[*i]) {
        if (first_reader[reader] >= 0 &&
            (first_reader[*i] < 0 || first_reader[reader] < first_reader[*i])) {
          first_reader[*i] = first_reader[reader];
        }
      }
    }
    for (int i : after_gather) key[i] = first_reader[i];
  }
  using Entry = std::pair<int64_t, int>;  // (key, position)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> ready;
  for (int i = 0; i < count; ++i) {
    if (waiting[i] == 0) ready.push({key[i], i});
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int next = ready.top().second;
    ready.pop();
    order.push_back(device_tasks.tasks[next]);
    for (int reader : readers[next]) {
      key[reader] = std::max(key[reader], key[next]);
      if (--waiting[reader] == 0) ready.push({key[reader], reader});
    }
  }
  if (static_cast<int>(order.size()) != count) order.clear();
  return order;
}

void ActOrder::AddOrderingInput(int task, const std::string& reg) {
  plan::Task& ordered = *plan_.mutable_tasks(task);
  ordered.add_inputs(reg);
  readers_[reg].push_back(task);
  ordered.set_ordering_inputs(ordered.ordering_inputs() + 1);
  if (!ordered.input_lookahead().empty()) ordered.add_input_lookahead(0);
}

void ActOrder::OrderDevice(const DeviceTasks& device_tasks) {
  const plan::Device& device = device_tasks.device;
  std::vector<std::string> values;  // of the trained variables
  for (int t : device_tasks.tasks) {
    const plan::Task& task = plan_.tasks(t);
    if (task.kind() == plan::VARIABLE && task.inputs_size() == 1) values.push_back(task.outputs(0));
  }
  if (values.empty()) return;
  std::vector<int> order = DataOrder(device_tasks);
  if (order.empty()) return;
  const int64_t micro_batches = device_tasks.micro_batches;

  // The chains: a COMPUTE task joins its stream's when every input comes from the step's start
  // (a source, a variable, or what the device computes from them alone: a ZeRO shard's
  // all-gather, a weight's cast) or from a chained task of the stream; on a pipeline stage also
  // from the other stages (a COPY or RECEIVE), and the forward and the backward chain apart.
  const bool pipeline_stage = device_tasks.pipeline_stage;
  absl::flat_hash_map<std::string, int> last_of_chain;  // chain -> its last task so far
  for (int t : order) {
    const plan::Task& task = plan_.tasks(t);
    const std::string stream = StreamName(task.stream());
    bool from_start = true;
    bool local = true;
    flags_[t].backward = device_tasks.forward_and_backward_apart && Backward(t);
    for (const std::string& input : task.inputs()) {
      const int from = LocalProducer(input, device);
      from_start = from_start && from >= 0 && flags_[from].step_start;
      const bool transfer =
          pipeline_stage && from >= 0 &&
          (plan_.tasks(from).kind() == plan::COPY || plan_.tasks(from).kind() == plan::RECEIVE);
      local = local && from >= 0 &&
              (flags_[from].step_start || transfer ||
               (flags_[from].chained && StreamName(plan_.tasks(from).stream()) == stream));
    }
    flags_[t].step_start = task.kind() == plan::SOURCE || task.kind() == plan::VARIABLE ||
                           (from_start && task.inputs_size() > 0);
    // Under micro-batches the chain holds the tasks that act on every micro-batch.
    if (task.kind() != plan::COMPUTE || task.outputs().empty() || !local ||
        PiecesPerStep(task) != micro_batches) {
      continue;
    }
    flags_[t].chained = true;
    auto [last, first] = last_of_chain.emplace(ChainOf(t), t);
    flags_[t].chain_position = first ? 0 : flags_[last->second].chain_position + 1;
    if (!first) {
      // Reading one of the predecessor's outputs as data already orders the task after it.
      const plan::Task& previous = plan_.tasks(last->second);
      const bool reads_previous =
          std::any_of(task.inputs().begin(), task.inputs().end(), [&](const std::string& input) {
            return std::find(previous.outputs().begin(), previous.outputs().end(), input) !=
                   previous.outputs().end();
          });
      if (!reads_previous) AddOrderingInput(t, previous.outputs(0));
      last->second = t;
    }
  }
  if (micro_batches > 1) ChainMicroBatches(order);

  if (OrderCollectives(order, micro_batches))
    order = DataOrder(device_tasks);  // with the new orders

  // The barrier gates each COMPUTE task that follows no gated one within the step (through the
  // device's data, the chains' inputs included): the first of each chain and what acts outside;
  // and the gathers that OrderCollectives left to start the step.
  std::vector<int> gated;
  for (int t : order) {
    const plan::Task& task = plan_.tasks(t);
    bool after = false;
    if (task.kind() != plan::VARIABLE) {
      for (const std::string& input : task.inputs()) {
        const int from = LocalProducer(input, device);
        after = after || (from >= 0 && flags_[from].follows);
      }
    }
    if (!after && (task.kind() == plan::COMPUTE || flags_[t].starts_step)) {
      gated.push_back(t);
      after = true;
    }
    flags_[t].follows = after;
  }
  if (!gated.empty()) {
    AddBarrier(device, values, gated, micro_batches);
    DropCrossStepSlots(order, DeviceKey::Of(device));
  }
  for (int t : device_tasks.tasks) flags_[t] = TaskFlags();
}

bool ActOrder::OrderCollectives(const std::vector<int>& order, int64_t micro_batches) {
  // Each stream's chain, by position (`order` is the order the chains were built in).
  absl::flat_hash_map<std::string, std::vector<int>> chains;
  for (int t : order) {
    if (flags_[t].chained) chains[ChainOf(t)].push_back(t);
  }
  // The gathers by stream, with the chain position of their first reader; the reduce-scatters
  // by stream, with their input's writer's.
  absl::flat_hash_map<std::string, std::vector<std::pair<int, int>>> gathers;
  absl::flat_hash_map<std::string, std::vector<std::pair<int, int>>> scatters;
  for (int t : order) {
    const plan::Task& task = plan_.tasks(t);
    if (task.kind() != plan::COLLECTIVE || task.outputs_size() != 1) continue;
    // Ordered into a chain only where it acts as often as the chain (not a gather once a step
    // under micro-batches).
    if (PiecesPerStep(task) != micro_batches) continue;
    if (flags_[t].step_start && task.collective().kind() == plan::ALL_GATHER) {
      // Every reader chained, on one stream: the first of them in its chain.
      const std::vector<int>& reading = readers_[task.outputs(0)];
      if (reading.empty()) continue;
      const std::string chain = ChainOf(reading[0]);
      const bool chained = std::all_of(reading.begin(), reading.end(), [&](int reader) {
        return flags_[reader].chained && ChainOf(reader) == chain;
      });
      if (!chained) continue;
      int first = flags_[reading[0]].chain_position;
      for (int reader : reading) first = std::min(first, flags_[reader].chain_position);
      gathers[chain].emplace_back(first, t);
    } else if (task.collective().kind() == plan::REDUCE_SCATTER) {
      // A gradient's: a variable updates from its output.
      const std::vector<int>& reading = readers_[task.outputs(0)];
      const bool gradient = std::any_of(reading.begin(), reading.end(), [&](int reader) {
        return plan_.tasks(reader).kind() == plan::VARIABLE;
      });
      const int from = LocalProducer(task.inputs(0), task.stream().device());
      if (gradient && from >= 0 && flags_[from].chained) {
        scatters[ChainOf(from)].emplace_back(flags_[from].chain_position, t);
      }
    }
  }
  bool added = false;
  for (auto& [stream, list] : gathers) {
    const std::vector<int>& chain = chains.at(stream);
    std::sort(list.begin(), list.end());
    int previous = -1;  // the first reader's position of the use before
    int current = -1;
    for (const auto& [first, gather] : list) {
      if (first != current) {
        previous = current;
        current = first;
      }
      if (previous >= 1) {
        AddOrderingInput(gather, plan_.tasks(chain[previous - 1]).outputs(0));
        added = true;
      } else {
        flags_[gather].starts_step = true;
      }
    }
  }
  for (auto& [stream, list] : scatters) {
    const std::vector<int>& chain = chains.at(stream);
    std::sort(list.begin(), list.end());
    for (size_t i = 0; i + 1 < list.size(); ++i) {
      const int next_writer = chain[list[i + 1].first];
      if (list[i + 1].first == list[i].first) continue;
      AddOrderingInput(next_writer, plan_.tasks(list[i].second).outputs(0));
      added = true;
    }
  }
  return added;
}

void ActOrder::ChainMicroBatches(const std::vector<int>& order) {
  absl::flat_hash_map<std::string, std::vector<int>> chains;
  for (int t : order) {
    if (flags_[t].chained) chains[ChainOf(t)].push_back(t);
  }
  for (const auto& [chain, tasks] : chains) {
    // The head: the first task whose first output only its chain reads.
    auto head = std::find_if(tasks.begin(), tasks.end(), [&](int t) {
      const std::vector<int>& reading = readers_[plan_.tasks(t).outputs(0)];
      return std::all_of(reading.begin(), reading.end(), [&, &chain = chain](int reader) {
        return flags_[reader].chained && ChainOf(reader) == chain;
      });
    });
    if (head == tasks.end() || *head == tasks.back()) continue;
    const std::string& token = plan_.tasks(*head).outputs(0);
    const plan::Task& tail = plan_.tasks(tasks.back());
    if (std::find(tail.inputs().begin(), tail.inputs().end(), token) == tail.inputs().end()) {
      AddOrderingInput(tasks.back(), token);
    }
    plan_.mutable_registers(register_position_.at(token))->set_num_slots(1);
  }
}

void ActOrder::AddBarrier(const plan::Device& device, const std::vector<std::string>& values,
                          const std::vector<int>& gated, int64_t micro_batches) {
  const std::string name = absl::StrCat("step-barrier@", DeviceName(device));
  const std::string repeated = absl::StrCat(name, "~repeat");
  // The token registers: 2 slots where a reader runs on another stream.
  auto add_token = [&](const std::string& reg_name, const std::vector<int>& readers) {
    bool one_stream = true;
    for (int t : readers) {
      const plan::Stream& stream = plan_.tasks(t).stream();
      one_stream = one_stream && stream.kind() == plan::STREAM_COMPUTE && stream.index() == 0;
    }
    plan::RegisterDesc* token = plan_.add_registers();
    token->set_name(reg_name);
    token->mutable_tensor()->add_shape(1);
    token->mutable_tensor()->set_data_type(plan::FLOAT32);
    token->set_num_slots(one_stream ? 1 : 2);
  };
  std::vector<int> per_step;
  std::vector<int> per_micro_batch;
  for (int t : gated) {
    (PiecesPerStep(plan_.tasks(t)) == 1 ? per_step : per_micro_batch).push_back(t);
  }
  std::vector<int> token_readers = per_step;
  if (!per_micro_batch.empty()) {
    token_readers.push_back(plan_.tasks_size());  // the REPEAT below, on the compute stream
    plan::Task* repeat = plan_.add_tasks();
    repeat->set_name(absl::StrCat("repeat:", name));
    repeat->set_kind(plan::REPEAT);
    *repeat->mutable_stream()->mutable_device() = device;
    repeat->mutable_stream()->set_kind(plan::STREAM_COMPUTE);
    repeat->set_factor(static_cast<int32_t>(micro_batches));
    repeat->add_inputs(name);
    repeat->add_outputs(repeated);
    repeat->set_index(static_cast<uint32_t>(plan_.tasks_size() - 1));
    repeat->set_pieces_per_step(static_cast<int32_t>(micro_batches));
    readers_[name].push_back(plan_.tasks_size() - 1);
    // A slot per micro-batch: the REPEAT emits the step's pieces at once, so that no gated reader
    // waits for another (a pipeline stage's backward chain for its forward).
    add_token(repeated, per_micro_batch);
    plan_.mutable_registers(plan_.registers_size() - 1)
        ->set_num_slots(static_cast<int32_t>(micro_batches));
  }
  add_token(name, token_readers);
  plan::KernelConf fill = KernelOfType("fill");
  SetFloat(&fill, "value", 0);
  plan::Task* barrier = plan_.add_tasks();
  barrier->set_name(name);
  barrier->set_kind(plan::COMPUTE);
  *barrier->mutable_stream()->mutable_device() = device;
  barrier->mutable_stream()->set_kind(plan::STREAM_COMPUTE);
  for (const std::string& value : values) barrier->add_inputs(value);
  barrier->set_ordering_inputs(static_cast<int32_t>(values.size()));
  barrier->add_outputs(name);
  barrier->set_kernel_index(plan_.kernels_size());
  *plan_.add_kernels() = std::move(fill);
  barrier->set_index(static_cast<uint32_t>(plan_.tasks_size() - 1));
  barrier->set_pieces_per_step(1);
  for (int t : per_step) AddOrderingInput(t, name);
  for (int t : per_micro_batch) AddOrderingInput(t, repeated);
}

void ActOrder::DropCrossStepSlots(const std::vector<int>& order, const DeviceKey& device) {
  auto on_device = [&](int task) {
    return DeviceKey::Of(plan_.tasks(task).stream().device()) == device;
  };
  // flags_[t].feeds_update: task t's act of a step precedes an update of that step (through the
  // device's data to a trained variable's gradient).
  for (auto t = order.rbegin(); t != order.rend(); ++t) {
    for (const std::string& output : plan_.tasks(*t).outputs()) {
      for (int reader : readers_[output]) {
        const plan::Task& reading = plan_.tasks(reader);
        const bool update = reading.kind() == plan::VARIABLE && reading.inputs_size() == 1 &&
                            reading.inputs(0) == output;
        if (on_device(reader) && (update || flags_[reader].feeds_update))
          flags_[*t].feeds_update = true;
      }
    }
  }
  for (int t : order) {
    const plan::Task& task = plan_.tasks(t);
    if (!flags_[t].follows || task.kind() == plan::VARIABLE || PiecesPerStep(task) != 1) continue;
    for (const std::string& output : task.outputs()) {
      const std::vector<int>& reading = readers_[output];
      const bool within_step =
          !reading.empty() && std::all_of(reading.begin(), reading.end(), [&](int reader) {
            return on_device(reader) && flags_[reader].feeds_update;
          });
      plan::RegisterDesc& reg = *plan_.mutable_registers(register_position_.at(output));
      if (within_step && reg.num_slots() == 2) reg.set_num_slots(1);
    }
  }
}

}  // namespace

void OrderActsForMemory(const job::Job& job, plan::Plan& plan) {
  absl::flat_hash_map<DeviceKey, int> device_position;
  std::vector<DeviceTasks> devices;
  for (int t = 0; t < plan.tasks_size(); ++t) {
    const plan::Device& device = plan.tasks(t).stream().device();
    auto [entry, added] =
        device_position.emplace(DeviceKey::Of(device), static_cast<int>(devices.size()));
    if (added) devices.push_back(DeviceTasks{device, {}, 1, false, false});
    DeviceTasks& tasks = devices[entry->second];
    tasks.tasks.push_back(t);
    tasks.micro_batches = std::max(tasks.micro_batches, PiecesPerStep(plan.tasks(t)));
  }
  ActOrder order(job, plan);
  // Under micro-batches, where a device holds one pipeline stage and the backward is not split
  // (one-forward-one-backward, GPipe), its chains also take what the other stages send, and the
  // forward and the backward get a chain each (micro-batches in order within each direction), but
  // on 1F1B's last stage, which runs a micro-batch's backward before the next forward. Only tasks
  // that act per micro-batch are chained there, so the per-step ones that read several stages'
  // data (gradient clipping's) stay out. Micro-batches whose experts exchange tokens are not
  // ordered (the exchanges overlap other micro-batches' compute). Interleaved and zero-bubble
  // schedules under micro-batches are not ordered (their weight gradients run micro-batches behind,
  // their stages share devices). GPU streams do not share memory yet.
  const bool pipelined = std::any_of(job.ops().begin(), job.ops().end(),
                                     [](const job::Op& op) { return op.stage() > 0; });
  const bool stage_chains =
      job.pipeline_schedule() == job::ONE_F_ONE_B || job.pipeline_schedule() == job::GPIPE;
  absl::flat_hash_map<std::string, int> stage_of_op;
  int last_stage = 0;
  for (const job::Op& op : job.ops()) {
    if (op.has_stage()) stage_of_op.emplace(op.name(), op.stage());
    last_stage = std::max(last_stage, op.stage());
  }
  for (DeviceTasks& device_tasks : devices) {
    if (device_tasks.device.type() != plan::CPU) continue;
    // Expert parallelism's token exchanges overlap another micro-batch's compute only where the
    // micro-batches may interleave.
    const bool exchanges_tokens =
        device_tasks.micro_batches > 1 &&
        std::any_of(device_tasks.tasks.begin(), device_tasks.tasks.end(), [&](int t) {
          return plan.tasks(t).kind() == plan::COLLECTIVE &&
                 plan.tasks(t).collective().kind() == plan::ALL_TO_ALL;
        });
    if (exchanges_tokens) continue;
    if (pipelined && device_tasks.micro_batches > 1) {
      absl::flat_hash_set<int> stages;
      for (int t : device_tasks.tasks) {
        auto found = stage_of_op.find(OpOfTask(plan.tasks(t)));
        if (found != stage_of_op.end()) stages.insert(found->second);
      }
      if (!stage_chains || stages.size() != 1) continue;
      device_tasks.pipeline_stage = true;
      device_tasks.forward_and_backward_apart =
          job.pipeline_schedule() == job::GPIPE || *stages.begin() != last_stage;
    }
    order.OrderDevice(device_tasks);
  }
}

}  // namespace loom::compiler
