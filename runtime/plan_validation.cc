#include "runtime/plan_validation.h"

#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/checked_arithmetic.h"
#include "core/collective_shapes.h"
#include "core/data_type.h"
#include "core/device_key.h"
#include "core/device_name.h"
#include "core/shared_kernels.h"
#include "core/tensor.h"
#include "runtime/actor_id.h"
#include "runtime/input_order_validation.h"
#include "runtime/memory_pool_validation.h"

namespace loom {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status CheckDevices(const plan::Plan& plan, absl::flat_hash_set<DeviceKey>* devices) {
  for (const plan::DeviceDesc& desc : plan.devices()) {
    const plan::Device& device = desc.device();
    const std::string name = DeviceName(device);
    if (device.type() == plan::DEVICE_TYPE_UNSPECIFIED) {
      return Invalid(absl::StrCat("device ", name, " has no type (cpu or cuda)"));
    }
    if (device.index() < 0 || device.index() > ActorId::kMaxDeviceIndex) {
      return Invalid(absl::StrCat("device ", name, " has an index outside [0, ",
                                  ActorId::kMaxDeviceIndex, "]"));
    }
    if (device.node() != plan.node()) {
      return Invalid(absl::StrCat("device ", name, " is not on this plan's node ", plan.node()));
    }
    if (desc.memory_budget_bytes() < 0) {
      return Invalid(absl::StrCat("device ", name, " has a negative memory budget"));
    }
    if (!devices->insert(DeviceKey::Of(device)).second) {
      return Invalid(absl::StrCat("device ", name, " is declared twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRegisters(const plan::Plan& plan,
                            absl::flat_hash_map<std::string, int>* register_position) {
  for (int i = 0; i < plan.registers_size(); ++i) {
    const plan::RegisterDesc& reg = plan.registers(i);
    if (reg.name().empty()) return Invalid(absl::StrCat("register #", i, " has no name"));
    if (!register_position->emplace(reg.name(), i).second) {
      return Invalid(absl::StrCat("register '", reg.name(), "' is declared twice"));
    }
    if (reg.num_slots() < 1) {
      return Invalid(absl::StrCat("register '", reg.name(), "' has ", reg.num_slots(),
                                  " slots: every register needs at least one slot (its credits)"));
    }
    if (DataTypeSize(reg.tensor().data_type()) == 0) {
      return Invalid(absl::StrCat("register '", reg.name(), "' has no data type"));
    }
    // Its slots are allocated from this shape, and kernels touch what it says: it must be a
    // tensor Loom holds (no negative extent, no count that overflows, within the limits).
    if (absl::StatusOr<int64_t> bytes =
            CheckedTensorBytes(reg.tensor().shape(), reg.tensor().data_type());
        !bytes.ok()) {
      return Invalid(absl::StrCat("register '", reg.name(), "': ", bytes.status().message()));
    }
  }
  return absl::OkStatus();
}

// A fetch's or variable's layout, which clients assemble pieces by: a logical tensor within the
// limits, and, when it has a hierarchy, extents >= 1 whose product (checked) is the number of
// its `ranks` (sinks or tasks, named `rank_noun`).
absl::Status CheckLayout(const std::string& who, const plan::TensorDesc& logical,
                         const google::protobuf::RepeatedField<int64_t>& hierarchy, int ranks,
                         const char* rank_noun) {
  if (absl::StatusOr<int64_t> bytes = CheckedTensorBytes(logical.shape(), logical.data_type());
      !bytes.ok()) {
    return Invalid(absl::StrCat(who, ": its logical tensor's ", bytes.status().message()));
  }
  if (hierarchy.empty()) return absl::OkStatus();
  std::optional<int64_t> product = 1;
  for (int64_t extent : hierarchy) {
    // Extents >= 1 never shrink the product: past `ranks` it cannot come back.
    product = extent < 1 ? std::nullopt : CheckedMultiply(*product, extent);
    if (!product.has_value() || *product > ranks) {
      product = std::nullopt;
      break;
    }
  }
  if (product != ranks) {
    return Invalid(absl::StrCat(who, ": hierarchy [", absl::StrJoin(hierarchy, ", "),
                                "] does not lay out its ", ranks, " ", rank_noun,
                                " (each extent >= 1, their product ", ranks, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckLayouts(const plan::Plan& plan) {
  for (const plan::Fetch& fetch : plan.fetches()) {
    if (absl::Status status =
            CheckLayout(absl::StrCat("fetch '", fetch.tensor(), "'"), fetch.logical(),
                        fetch.hierarchy(), fetch.sinks_size(), "sinks");
        !status.ok()) {
      return status;
    }
  }
  for (const plan::VariableLayout& variable : plan.variables()) {
    if (absl::Status status =
            CheckLayout(absl::StrCat("variable layout '", variable.name(), "'"), variable.logical(),
                        variable.hierarchy(), variable.tasks_size(), "tasks");
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckArity(const plan::Task& task, int min_inputs, int max_inputs, int min_outputs,
                        int max_outputs, const char* kind) {
  auto range = [](int low, int high) {
    if (low == high) return absl::StrCat(low);
    if (high < 0) return absl::StrCat("at least ", low);
    return absl::StrCat(low, " to ", high);
  };
  if (task.inputs_size() < min_inputs || (max_inputs >= 0 && task.inputs_size() > max_inputs)) {
    return Invalid(absl::StrCat("task '", task.name(), "': a ", kind, " task reads ",
                                range(min_inputs, max_inputs), " registers, not ",
                                task.inputs_size()));
  }
  if (task.outputs_size() < min_outputs ||
      (max_outputs >= 0 && task.outputs_size() > max_outputs)) {
    return Invalid(absl::StrCat("task '", task.name(), "': a ", kind, " task writes ",
                                range(min_outputs, max_outputs), " registers, not ",
                                task.outputs_size()));
  }
  return absl::OkStatus();
}

absl::Status CheckKind(const plan::Task& task, const plan::Plan& plan,
                       const absl::flat_hash_map<std::string, int>& register_position) {
  auto desc = [&](const std::string& name) -> const plan::RegisterDesc& {
    return plan.registers(register_position.at(name));
  };
  switch (task.kind()) {
    case plan::COMPUTE:
      if (KernelOf(plan, task).op_type().empty()) {
        return Invalid(
            absl::StrCat("task '", task.name(), "': a compute task needs kernel.op_type"));
      }
      return CheckArity(task, 0, -1, 1, -1, "compute");
    case plan::SOURCE:
      if (task.num_pieces() < 0) {
        return Invalid(absl::StrCat("task '", task.name(), "': num_pieces is negative"));
      }
      if (KernelOf(plan, task).op_type().empty()) {
        return Invalid(absl::StrCat("task '", task.name(),
                                    "': a source task needs kernel.op_type to fill its pieces"));
      }
      return CheckArity(task, 0, 0, 1, -1, "source");
    case plan::SINK:
      return CheckArity(task, 1, -1, 0, 0, "sink");
    case plan::VARIABLE: {
      if (absl::Status status = CheckArity(task, 0, 1, 1, 1, "variable"); !status.ok()) {
        return status;
      }
      if (task.num_pieces() < 0) {
        return Invalid(absl::StrCat("task '", task.name(), "': num_pieces is negative"));
      }
      if (InitializerOf(plan, task).op_type().empty()) {
        return Invalid(
            absl::StrCat("task '", task.name(), "': a variable task needs initializer.op_type"));
      }
      const plan::RegisterDesc& value = desc(task.outputs(0));
      if (value.num_slots() != 1) {
        return Invalid(absl::StrCat("task '", task.name(), "': its value register '", value.name(),
                                    "' must have exactly 1 slot, not ", value.num_slots(),
                                    " (the value is updated in place)"));
      }
      if (task.inputs_size() == 1) {
        if (KernelOf(plan, task).op_type().empty()) {
          return Invalid(absl::StrCat("task '", task.name(),
                                      "': a variable with a gradient input needs kernel.op_type "
                                      "(its optimizer)"));
        }
        const plan::TensorDesc& gradient = desc(task.inputs(0)).tensor();
        if (gradient.data_type() != plan::FLOAT32 || value.tensor().data_type() != plan::FLOAT32 ||
            Shape(gradient.shape()) != Shape(value.tensor().shape())) {
          return Invalid(absl::StrCat(
              "task '", task.name(), "': its gradient ", DataTypeName(gradient.data_type()),
              Shape(gradient.shape()).ToString(), " must be float32 and shaped like its value ",
              DataTypeName(value.tensor().data_type()), Shape(value.tensor().shape()).ToString()));
        }
      }
      if (task.num_optimizer_states() < 0) {
        return Invalid(absl::StrCat("task '", task.name(), "': num_optimizer_states is negative"));
      }
      if (const int states = StateInitializerCount(task); states > 0) {
        if (states != task.num_optimizer_states()) {
          return Invalid(absl::StrCat(
              "task '", task.name(), "': ", states, " state_initializers for ",
              task.num_optimizer_states(),
              " optimizer states; give one per state, or none to start the states at zero"));
        }
        for (int i = 0; i < states; ++i) {
          if (StateInitializerOf(plan, task, i).op_type().empty()) {
            return Invalid(absl::StrCat("task '", task.name(), "': state_initializers[", i,
                                        "] needs op_type"));
          }
        }
      }
      return absl::OkStatus();
    }
    case plan::COPY: {
      if (absl::Status status = CheckArity(task, 1, 1, 1, 1, "copy"); !status.ok()) return status;
      const plan::TensorDesc& in = desc(task.inputs(0)).tensor();
      const plan::TensorDesc& out = desc(task.outputs(0)).tensor();
      if (in.data_type() != out.data_type() ||
          Shape(in.shape()).NumElements() != Shape(out.shape()).NumElements()) {
        return Invalid(absl::StrCat("task '", task.name(),
                                    "': a copy needs the same data type "
                                    "and element count on both sides, not ",
                                    DataTypeName(in.data_type()), Shape(in.shape()).ToString(),
                                    " -> ", DataTypeName(out.data_type()),
                                    Shape(out.shape()).ToString()));
      }
      return absl::OkStatus();
    }
    case plan::SEND:
    case plan::RECEIVE: {
      const bool send = task.kind() == plan::SEND;
      if (absl::Status status =
              send ? CheckArity(task, 1, 1, 0, 0, "send") : CheckArity(task, 0, 0, 1, 1, "receive");
          !status.ok()) {
        return status;
      }
      const plan::NetworkPeer& peer = task.peer();
      if (peer.task().empty() || peer.stream().device().node() == plan.node()) {
        return Invalid(absl::StrCat("task '", task.name(), "': a ", send ? "send" : "receive",
                                    " task needs its peer task on another node (peer '",
                                    peer.task(), "' on node ", peer.stream().device().node(), ")"));
      }
      const plan::Device& device = peer.stream().device();
      if (device.node() < 0 || device.node() > ActorId::kMaxNode || device.index() < 0 ||
          device.index() > ActorId::kMaxDeviceIndex || peer.stream().index() < 0 ||
          peer.stream().index() > ActorId::kMaxStreamIndex ||
          peer.index() > ActorId::kMaxTaskIndex) {
        return Invalid(absl::StrCat("task '", task.name(), "': its peer '", peer.task(),
                                    "' has a node, device, stream or task index out of range"));
      }
      return absl::OkStatus();
    }
    case plan::UNPACK:
    case plan::REPEAT:
    case plan::ACCUMULATE: {
      const char* kind = task.kind() == plan::UNPACK   ? "unpack"
                         : task.kind() == plan::REPEAT ? "repeat"
                                                       : "accumulate";
      if (absl::Status status = CheckArity(task, 1, 1, 1, 1, kind); !status.ok()) return status;
      if (task.factor() < 1) {
        return Invalid(absl::StrCat("task '", task.name(), "': a ", kind,
                                    " task needs factor >= 1 (the number of micro-batches), not ",
                                    task.factor()));
      }
      const plan::TensorDesc& in = desc(task.inputs(0)).tensor();
      const plan::TensorDesc& out = desc(task.outputs(0)).tensor();
      if (in.data_type() != out.data_type()) {
        return Invalid(
            absl::StrCat("task '", task.name(), "': input and output data types differ"));
      }
      Shape in_shape(in.shape());
      Shape out_shape(out.shape());
      if (task.kind() == plan::UNPACK) {
        Shape expected = in_shape;
        if (expected.rank() == 0 || expected.dimension(0) % task.factor() != 0) {
          return Invalid(absl::StrCat("task '", task.name(), "': cannot unpack ",
                                      in_shape.ToString(), " into ", task.factor(),
                                      " pieces along axis 0"));
        }
        expected.set_dimension(0, expected.dimension(0) / task.factor());
        if (expected != out_shape) {
          return Invalid(absl::StrCat("task '", task.name(), "': unpacking ", in_shape.ToString(),
                                      " by ", task.factor(), " gives ", expected.ToString(),
                                      ", but the output register is ", out_shape.ToString()));
        }
      } else if (in_shape != out_shape) {
        return Invalid(absl::StrCat("task '", task.name(), "': input ", in_shape.ToString(),
                                    " and output ", out_shape.ToString(), " shapes differ"));
      }
      if (task.kind() == plan::ACCUMULATE && in.data_type() != plan::FLOAT32) {
        return Invalid(absl::StrCat("task '", task.name(), "': accumulate supports float32 only"));
      }
      return absl::OkStatus();
    }
    case plan::COLLECTIVE: {
      // Its data input, then its ordering inputs (CheckOrderingInputs bounds their count).
      const int inputs = 1 + std::max(task.ordering_inputs(), 0);
      return CheckArity(task, inputs, inputs, 1, 1, "collective");
    }
    default:
      return Invalid(absl::StrCat("task '", task.name(), "' has no kind"));
  }
}

absl::Status CheckCommunicators(const plan::Plan& plan,
                                absl::flat_hash_map<std::string, int>* communicator_position) {
  for (int c = 0; c < plan.communicators_size(); ++c) {
    const plan::Communicator& communicator = plan.communicators(c);
    if (communicator.name().empty()) {
      return Invalid(absl::StrCat("communicator #", c, " has no name"));
    }
    const std::string prefix = absl::StrCat("communicator '", communicator.name(), "'");
    if (!communicator_position->emplace(communicator.name(), c).second) {
      return Invalid(absl::StrCat(prefix, " is declared twice"));
    }
    if (communicator.devices_size() == 0) return Invalid(absl::StrCat(prefix, " has no devices"));
    if (communicator.num_collectives() < 1) {
      return Invalid(absl::StrCat(prefix, " has num_collectives ", communicator.num_collectives(),
                                  ": it needs at least 1 (the length of its global order)"));
    }
    // Validation keeps a table of num_collectives x devices: both are bounded by the plan's own
    // size (a task per collective of a rank here; a device per rank, each a task's at most once
    // per collective), so a small plan cannot make it allocate without bound.
    if (communicator.num_collectives() > plan.tasks_size()) {
      return Invalid(absl::StrCat(prefix, " has num_collectives ", communicator.num_collectives(),
                                  ", more than the plan's ", plan.tasks_size(),
                                  " tasks could run"));
    }
    absl::flat_hash_set<DeviceKey> seen;
    for (int rank = 0; rank < communicator.devices_size(); ++rank) {
      const plan::Device& device = communicator.devices(rank);
      if (device.type() == plan::DEVICE_TYPE_UNSPECIFIED) {
        return Invalid(absl::StrCat(prefix, ": the device of rank ", rank, " has no type"));
      }
      if (!seen.insert(DeviceKey::Of(device)).second) {
        return Invalid(absl::StrCat(prefix, " lists device ", DeviceName(device),
                                    " twice (one rank per device)"));
      }
    }
  }
  return absl::OkStatus();
}

// The settings every rank of one collective shares, as text (for comparisons and messages).
std::string CollectiveSettings(const plan::CollectiveConf& conf) {
  std::string text = absl::StrCat(CollectiveKindName(conf.kind()), " ", DescribeCollective(conf));
  if (conf.kind() == plan::ALL_REDUCE || conf.kind() == plan::REDUCE_SCATTER) {
    absl::StrAppend(&text, conf.reduce() == plan::REDUCE_MAX ? " max" : " sum");
  }
  if (conf.kind() != plan::ALL_REDUCE) absl::StrAppend(&text, " axis ", conf.axis());
  if (conf.kind() == plan::ALL_TO_ALL) absl::StrAppend(&text, " concat_axis ", conf.concat_axis());
  return text;
}

// COLLECTIVE tasks: a known communicator, a rank on the right device, a communication stream
// shared by all of the rank's collectives of that communicator and by nothing else, a sequence
// in the global order, and for every (communicator, sequence) exactly one task per rank of this
// node, all running the same collective with shapes that fit together.
absl::Status CheckCollectives(const plan::Plan& plan,
                              const absl::flat_hash_map<std::string, int>& register_position) {
  absl::flat_hash_map<std::string, int> communicator_position;
  if (absl::Status status = CheckCommunicators(plan, &communicator_position); !status.ok()) {
    return status;
  }
  auto tensor_of = [&](const std::string& name) -> const plan::TensorDesc& {
    return plan.registers(register_position.at(name)).tensor();
  };
  // tasks_of[communicator][sequence][rank]: the task position, or -1. At most 2^28 entries in
  // all (2^14 collectives of 2^14 ranks; no real job comes close), so that a plan of a few
  // megabytes cannot make validation allocate gigabytes.
  constexpr int64_t kMaxCollectiveTable = int64_t{1} << 28;
  int64_t table_entries = 0;
  for (const plan::Communicator& communicator : plan.communicators()) {
    table_entries += int64_t{communicator.num_collectives()} * communicator.devices_size();
    if (table_entries > kMaxCollectiveTable) {
      return Invalid(absl::StrCat("communicator '", communicator.name(),
                                  "': the plan's "
                                  "communicators have more than 2^28 (collective, rank) pairs"));
    }
  }
  std::vector<std::vector<std::vector<int>>> tasks_of(plan.communicators_size());
  for (int c = 0; c < plan.communicators_size(); ++c) {
    const plan::Communicator& communicator = plan.communicators(c);
    tasks_of[c].assign(communicator.num_collectives(),
                       std::vector<int>(communicator.devices_size(), -1));
  }
  // The communicator whose collectives a stream runs, and a task that runs there.
  absl::flat_hash_map<uint64_t, int> collective_stream_task;
  // The stream of each (communicator, rank), by one task that runs there.
  absl::flat_hash_map<std::pair<int, int>, int> rank_stream_task;
  for (int i = 0; i < plan.tasks_size(); ++i) {
    const plan::Task& task = plan.tasks(i);
    if (task.kind() != plan::COLLECTIVE) continue;
    const plan::CollectiveConf& conf = task.collective();
    const std::string prefix = absl::StrCat("task '", task.name(), "': ");
    auto found = communicator_position.find(conf.communicator());
    if (found == communicator_position.end()) {
      return Invalid(absl::StrCat(prefix, "collective on communicator '", conf.communicator(),
                                  "', which the plan does not declare"));
    }
    const int c = found->second;
    const plan::Communicator& communicator = plan.communicators(c);
    if (conf.kind() == plan::COLLECTIVE_KIND_UNSPECIFIED) {
      return Invalid(absl::StrCat(prefix,
                                  "the collective has no kind (ALL_REDUCE, ALL_GATHER, "
                                  "REDUCE_SCATTER or ALL_TO_ALL)"));
    }
    if (task.rank() < 0 || task.rank() >= communicator.devices_size()) {
      return Invalid(absl::StrCat(prefix, "rank ", task.rank(), " is outside communicator '",
                                  communicator.name(), "' of ", communicator.devices_size(),
                                  " ranks"));
    }
    const plan::Device& rank_device = communicator.devices(task.rank());
    if (!SameDevice(rank_device, task.stream().device())) {
      return Invalid(absl::StrCat(prefix, "runs on ", DeviceName(task.stream().device()),
                                  " as rank ", task.rank(), " of communicator '",
                                  communicator.name(), "', whose rank ", task.rank(), " is ",
                                  DeviceName(rank_device)));
    }
    if (task.stream().kind() != plan::STREAM_COMMUNICATION) {
      return Invalid(absl::StrCat(prefix, "a collective runs on a communication stream, not on ",
                                  StreamName(task.stream())));
    }
    if (conf.sequence() < 0 || conf.sequence() >= communicator.num_collectives()) {
      return Invalid(absl::StrCat(prefix, "sequence ", conf.sequence(), " is outside [0, ",
                                  communicator.num_collectives(), ") of communicator '",
                                  communicator.name(), "'"));
    }
    const plan::TensorDesc& input = tensor_of(task.inputs(0));
    const plan::TensorDesc& output = tensor_of(task.outputs(0));
    if (input.data_type() != output.data_type()) {
      return Invalid(absl::StrCat(prefix, "input ", DataTypeName(input.data_type()), " and output ",
                                  DataTypeName(output.data_type()), " data types differ"));
    }
    if (IsReduction(conf.kind()) && input.data_type() != plan::FLOAT32) {
      return Invalid(absl::StrCat(prefix, CollectiveKindName(conf.kind()),
                                  " reduces float32 only, not ", DataTypeName(input.data_type())));
    }
    if (absl::Status status =
            CheckCollectiveRankShapes(conf, communicator.devices_size(), task.rank(),
                                      Shape(input.shape()), Shape(output.shape()));
        !status.ok()) {
      return Invalid(absl::StrCat(prefix, status.message()));
    }
    int& slot = tasks_of[c][conf.sequence()][task.rank()];
    if (slot >= 0) {
      return Invalid(absl::StrCat(prefix, "both '", plan.tasks(slot).name(), "' and '", task.name(),
                                  "' are rank ", task.rank(), " of sequence ", conf.sequence(),
                                  " on communicator '", communicator.name(), "'"));
    }
    slot = i;
    // One stream per (communicator, rank): it keeps the rank's collectives in order.
    auto [rank_stream, inserted] = rank_stream_task.emplace(std::make_pair(c, task.rank()), i);
    if (!inserted) {
      const plan::Task& other = plan.tasks(rank_stream->second);
      if (ActorId::Make(other.stream(), 0).stream_key() !=
          ActorId::Make(task.stream(), 0).stream_key()) {
        return Invalid(absl::StrCat(
            prefix, "runs on ", StreamName(task.stream()), " while '", other.name(),
            "', another collective of rank ", task.rank(), " of communicator '",
            communicator.name(), "', runs on ", StreamName(other.stream()),
            ": a rank's collectives of one communicator share one communication stream, which "
            "keeps them in order"));
      }
    }
    uint64_t stream_key = ActorId::Make(task.stream(), 0).stream_key();
    auto [stream, first] = collective_stream_task.emplace(stream_key, i);
    if (!first && plan.tasks(stream->second).collective().communicator() != conf.communicator()) {
      return Invalid(absl::StrCat(
          prefix, "runs a collective of communicator '", conf.communicator(), "' on ",
          StreamName(task.stream()), ", where '", plan.tasks(stream->second).name(),
          "' runs one of communicator '", plan.tasks(stream->second).collective().communicator(),
          "': each communicator needs its own communication stream (a rank blocks in a "
          "collective, so two communicators on one thread could deadlock)"));
    }
  }
  // Nothing else runs on a collective stream: a rank blocks in its collectives.
  for (const plan::Task& task : plan.tasks()) {
    if (task.kind() == plan::COLLECTIVE) continue;
    auto stream = collective_stream_task.find(ActorId::Make(task.stream(), 0).stream_key());
    if (stream != collective_stream_task.end()) {
      const plan::Task& collective = plan.tasks(stream->second);
      return Invalid(absl::StrCat("task '", task.name(), "' runs on ", StreamName(task.stream()),
                                  ", which runs the collectives of communicator '",
                                  collective.collective().communicator(), "' (like '",
                                  collective.name(),
                                  "'): a stream with collectives runs nothing else, since "
                                  "a rank blocks there until its peers arrive"));
    }
  }
  // Every rank of this node runs every collective, the same one as its peers.
  for (int c = 0; c < plan.communicators_size(); ++c) {
    const plan::Communicator& communicator = plan.communicators(c);
    const std::string name = absl::StrCat("communicator '", communicator.name(), "'");
    for (int sequence = 0; sequence < communicator.num_collectives(); ++sequence) {
      const std::vector<int>& ranks = tasks_of[c][sequence];
      int reference = -1;
      for (int rank = 0; rank < communicator.devices_size(); ++rank) {
        if (ranks[rank] >= 0 && reference < 0) reference = ranks[rank];
      }
      bool complete = true;
      for (int rank = 0; rank < communicator.devices_size(); ++rank) {
        if (communicator.devices(rank).node() != plan.node()) {
          complete = false;
          continue;
        }
        if (ranks[rank] < 0) {
          if (reference < 0) {
            return Invalid(absl::StrCat(name, " has ", communicator.num_collectives(),
                                        " collectives but no task runs sequence ", sequence,
                                        " (rank ", rank, " on ",
                                        DeviceName(communicator.devices(rank)), ")"));
          }
          return Invalid(absl::StrCat(
              name, ": task '", plan.tasks(reference).name(), "' runs sequence ", sequence,
              " but no task runs it for rank ", rank, " (", DeviceName(communicator.devices(rank)),
              "): every rank runs every collective of its communicator"));
        }
      }
      if (reference < 0) continue;
      const plan::Task& first = plan.tasks(reference);
      const std::string first_settings = CollectiveSettings(first.collective());
      const plan::DataType data_type = tensor_of(first.inputs(0)).data_type();
      for (int rank = 0; rank < communicator.devices_size(); ++rank) {
        if (ranks[rank] < 0) continue;
        const plan::Task& task = plan.tasks(ranks[rank]);
        if (CollectiveSettings(task.collective()) != first_settings) {
          return Invalid(absl::StrCat("task '", task.name(), "' (rank ", task.rank(), ") runs ",
                                      CollectiveSettings(task.collective()), " while '",
                                      first.name(), "' (rank ", first.rank(), ") runs ",
                                      first_settings, ": the ranks of one sequence of ", name,
                                      " run the same collective"));
        }
        if (tensor_of(task.inputs(0)).data_type() != data_type) {
          return Invalid(absl::StrCat("task '", task.name(), "' (rank ", task.rank(), ") moves ",
                                      DataTypeName(tensor_of(task.inputs(0)).data_type()),
                                      " while '", first.name(), "' moves ",
                                      DataTypeName(data_type)));
        }
      }
      if (!complete) continue;
      // Every rank is here: the output shapes must be what the inputs give.
      std::vector<Shape> inputs;
      for (int rank = 0; rank < communicator.devices_size(); ++rank) {
        inputs.push_back(Shape(tensor_of(plan.tasks(ranks[rank]).inputs(0)).shape()));
      }
      for (int rank = 0; rank < communicator.devices_size(); ++rank) {
        const plan::Task& task = plan.tasks(ranks[rank]);
        absl::StatusOr<Shape> expected = CollectiveOutputShape(task.collective(), inputs, rank);
        if (!expected.ok()) {
          return Invalid(absl::StrCat("task '", task.name(), "': ", expected.status().message()));
        }
        Shape actual(tensor_of(task.outputs(0)).shape());
        if (*expected != actual) {
          return Invalid(absl::StrCat(
              "task '", task.name(), "': its output register '", task.outputs(0), "' is ",
              actual.ToString(), ", but the ", CollectiveKindName(task.collective().kind()),
              " of the ranks' inputs gives rank ", rank, " ", expected->ToString()));
        }
      }
    }
  }
  return absl::OkStatus();
}

// Kahn's algorithm; on a cycle, walks it to name its tasks.
absl::Status CheckAcyclic(const plan::Plan& plan, const std::vector<std::vector<int>>& successors) {
  int count = plan.tasks_size();
  std::vector<int> in_degree(count, 0);
  for (const auto& next : successors) {
    for (int successor : next) ++in_degree[successor];
  }
  std::deque<int> frontier;
  for (int i = 0; i < count; ++i) {
    if (in_degree[i] == 0) frontier.push_back(i);
  }
  int visited = 0;
  while (!frontier.empty()) {
    int task = frontier.front();
    frontier.pop_front();
    ++visited;
    for (int successor : successors[task]) {
      if (--in_degree[successor] == 0) frontier.push_back(successor);
    }
  }
  if (visited == count) return absl::OkStatus();
  // Every remaining task has a remaining predecessor: walk successors until one repeats.
  int start = 0;
  while (in_degree[start] == 0) ++start;
  std::vector<int> order;
  std::vector<int> seen_at(count, -1);
  int current = start;
  while (seen_at[current] < 0) {
    seen_at[current] = static_cast<int>(order.size());
    order.push_back(current);
    for (int successor : successors[current]) {
      if (in_degree[successor] > 0) {
        current = successor;
        break;
      }
    }
  }
  std::vector<std::string> names;
  for (size_t i = seen_at[current]; i < order.size(); ++i) {
    names.push_back(absl::StrCat("'", plan.tasks(order[i]).name(), "'"));
  }
  names.push_back(absl::StrCat("'", plan.tasks(current).name(), "'"));
  return Invalid(absl::StrCat("cycle that can never act: ", absl::StrJoin(names, " -> "),
                              " (each task waits for the previous one's output)"));
}

}  // namespace

uint32_t TaskIndex(const plan::Plan& plan, int position) {
  const plan::Task& task = plan.tasks(position);
  return task.has_index() ? task.index() : static_cast<uint32_t>(position);
}

absl::Status ValidatePlan(const plan::Plan& plan) {
  if (plan.tasks_size() == 0) return Invalid("the plan has no tasks");
  if (plan.node() < 0 || plan.node() > ActorId::kMaxNode) {
    return Invalid(absl::StrCat("the plan's node ", plan.node(), " is out of range"));
  }
  if (absl::Status status = CheckSharedKernels(plan); !status.ok()) return status;
  absl::flat_hash_set<DeviceKey> devices;
  if (absl::Status status = CheckDevices(plan, &devices); !status.ok()) return status;
  if (plan.host_memory_budget_bytes() < 0) {
    return Invalid(absl::StrCat("node ", plan.node(), " has a negative host memory budget"));
  }
  absl::flat_hash_map<std::string, int> pool_position;
  if (absl::Status status = CheckMemoryPools(plan, devices, &pool_position); !status.ok()) {
    return status;
  }
  absl::flat_hash_map<std::string, int> register_position;
  if (absl::Status status = CheckRegisters(plan, &register_position); !status.ok()) return status;
  if (absl::Status status = CheckLayouts(plan); !status.ok()) return status;

  absl::flat_hash_map<std::string, int> task_position;
  absl::flat_hash_set<uint32_t> indices;
  std::vector<int> producer(plan.registers_size(), -1);
  std::vector<std::vector<int>> consumers(plan.registers_size());
  for (int i = 0; i < plan.tasks_size(); ++i) {
    const plan::Task& task = plan.tasks(i);
    if (task.name().empty()) return Invalid(absl::StrCat("task #", i, " has no name"));
    if (!task_position.emplace(task.name(), i).second) {
      return Invalid(absl::StrCat("task '", task.name(), "' is declared twice"));
    }
    uint32_t index = TaskIndex(plan, i);
    if (index > ActorId::kMaxTaskIndex) {
      return Invalid(absl::StrCat("task '", task.name(), "' has index ", index, " above ",
                                  ActorId::kMaxTaskIndex));
    }
    if (!indices.insert(index).second) {
      return Invalid(absl::StrCat("task '", task.name(), "' has index ", index,
                                  ", which another task has too"));
    }
    const plan::Stream& stream = task.stream();
    if (!devices.contains(DeviceKey::Of(stream.device()))) {
      return Invalid(absl::StrCat("task '", task.name(), "' runs on device ",
                                  DeviceName(stream.device()),
                                  ", which is not among the plan's devices"));
    }
    if (stream.index() < 0 || stream.index() > ActorId::kMaxStreamIndex) {
      return Invalid(absl::StrCat("task '", task.name(), "' has a stream index outside [0, ",
                                  ActorId::kMaxStreamIndex, "]"));
    }
    for (const std::string& name : task.inputs()) {
      auto found = register_position.find(name);
      if (found == register_position.end()) {
        return Invalid(absl::StrCat("task '", task.name(), "' reads register '", name,
                                    "', which is not declared"));
      }
      consumers[found->second].push_back(i);
    }
    for (const std::string& name : task.outputs()) {
      auto found = register_position.find(name);
      if (found == register_position.end()) {
        return Invalid(absl::StrCat("task '", task.name(), "' writes register '", name,
                                    "', which is not declared"));
      }
      if (producer[found->second] >= 0) {
        return Invalid(absl::StrCat("register '", name, "' is produced by both '",
                                    plan.tasks(producer[found->second]).name(), "' and '",
                                    task.name(), "'"));
      }
      producer[found->second] = i;
    }
  }

  std::vector<std::vector<int>> successors(plan.tasks_size());
  for (int r = 0; r < plan.registers_size(); ++r) {
    const plan::RegisterDesc& reg = plan.registers(r);
    if (producer[r] < 0) {
      if (consumers[r].empty()) {
        return Invalid(absl::StrCat("dangling register '", reg.name(), "': no task produces it"));
      }
      return Invalid(absl::StrCat("dangling register '", reg.name(), "': read by '",
                                  plan.tasks(consumers[r][0]).name(), "' but produced by no task"));
    }
    const plan::Task& producer_task = plan.tasks(producer[r]);
    if (!reg.producer().empty() && reg.producer() != producer_task.name()) {
      return Invalid(absl::StrCat("register '", reg.name(), "' says its producer is '",
                                  reg.producer(), "', but '", producer_task.name(), "' writes it"));
    }
    if (absl::Status status = CheckPoolPlacement(reg, producer_task, plan, pool_position);
        !status.ok()) {
      return status;
    }
    if (reg.host_memory() && (!reg.pool().empty() || producer_task.kind() != plan::COMPUTE)) {
      return Invalid(absl::StrCat("register '", reg.name(),
                                  "' is in host memory, which only a COMPUTE task's register "
                                  "outside memory pools may be (it is written by '",
                                  producer_task.name(), "')"));
    }
    if (reg.consumers_size() > 0) {
      absl::flat_hash_set<std::string> declared(reg.consumers().begin(), reg.consumers().end());
      absl::flat_hash_set<std::string> actual;
      for (int consumer : consumers[r]) actual.insert(plan.tasks(consumer).name());
      if (declared != actual) {
        return Invalid(absl::StrCat("register '", reg.name(),
                                    "' lists consumers that differ from the tasks reading it"));
      }
    }
    for (int consumer : consumers[r]) {
      const plan::Task& consumer_task = plan.tasks(consumer);
      const plan::Device& from = producer_task.stream().device();
      const plan::Device& to = consumer_task.stream().device();
      bool shared_host_memory =
          from.node() == to.node() && from.type() == plan::CPU && to.type() == plan::CPU;
      if (!SameDevice(from, to) && !shared_host_memory && consumer_task.kind() != plan::COPY) {
        return Invalid(absl::StrCat("task '", consumer_task.name(), "' on ", DeviceName(to),
                                    " reads register '", reg.name(), "' on ", DeviceName(from),
                                    ": a copy task must move it between these devices"));
      }
      // A variable's gradient input is loop-carried (it updates the next step's value): it closes
      // no cycle.
      if (consumer_task.kind() != plan::VARIABLE) successors[producer[r]].push_back(consumer);
    }
  }
  for (const plan::Task& task : plan.tasks()) {
    if (task.evaluation_every_steps() < 0 || task.first_step() < 0) {
      return Invalid(absl::StrCat("task '", task.name(),
                                  "': evaluation_every_steps and first_step must be >= 0, got ",
                                  task.evaluation_every_steps(), " and ", task.first_step()));
    }
    if (task.evaluation_every_steps() > 0 && task.kind() == plan::VARIABLE) {
      return Invalid(absl::StrCat("task '", task.name(),
                                  "': a VARIABLE task cannot be of the evaluation (it updates the "
                                  "weights every step)"));
    }
    if (task.pieces_per_step() < 0) {
      return Invalid(absl::StrCat("task '", task.name(), "': pieces_per_step is negative"));
    }
    if (absl::Status status = CheckLookahead(task, plan, register_position); !status.ok()) {
      return status;
    }
    if (absl::Status status = CheckOrderingInputs(task); !status.ok()) return status;
    if (absl::Status status = CheckKind(task, plan, register_position); !status.ok()) {
      return status;
    }
  }
  if (absl::Status status = CheckCollectives(plan, register_position); !status.ok()) {
    return status;
  }
  return CheckAcyclic(plan, successors);
}

}  // namespace loom
