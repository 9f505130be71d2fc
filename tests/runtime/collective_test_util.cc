#include "tests/runtime/collective_test_util.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/actor_factory.h"
#include "actors/sink_actor.h"
#include "core/collective_shapes.h"
#include "glog/logging.h"
#include "kernels/attributes.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/runtime/test_kernels.h"

namespace loom::testing {
namespace {

// "test_pattern": output element i of piece p is (seed * 131 + p * 17 + i * 7) % 251, in the
// output's data type.
class PatternKernel final : public Kernel {
 public:
  explicit PatternKernel(int64_t seed) : seed_(seed) {}
  absl::Status Compute(const KernelContext& context) override {
    const TensorView& out = context.outputs[0];
    for (int64_t i = 0; i < out.NumElements(); ++i) {
      const int64_t value = (seed_ * 131 + context.piece * 17 + i * 7) % 251;
      switch (out.data_type) {
        case plan::FLOAT32:
          out.Data<float>()[i] = static_cast<float>(value);
          break;
        case plan::INT32:
          out.Data<int32_t>()[i] = static_cast<int32_t>(value);
          break;
        case plan::INT64:
          out.Data<int64_t>()[i] = value;
          break;
        case plan::UINT8:
          out.Data<uint8_t>()[i] = static_cast<uint8_t>(value);
          break;
        case plan::UINT16:
          out.Data<uint16_t>()[i] = static_cast<uint16_t>(value);
          break;
        default:
          return absl::InvalidArgumentError("test_pattern: unsupported data type");
      }
    }
    return absl::OkStatus();
  }

 private:
  int64_t seed_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Test data.

const KernelRegistry& CollectiveTestRegistry() {
  static const KernelRegistry* registry = [] {
    auto* result = new KernelRegistry();
    absl::Status status = RegisterCpuKernels(result);
    CHECK(status.ok()) << status;
    RegisterTestKernels(result);
    status =
        result->Register("test_pattern", plan::CPU,
                         [](const KernelInit& init) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                           absl::StatusOr<int64_t> seed = Attributes(*init.conf).GetInt("seed");
                           if (!seed.ok()) return seed.status();
                           return std::make_unique<PatternKernel>(*seed);
                         });
    CHECK(status.ok()) << status;
    return result;
  }();
  return *registry;
}

absl::StatusOr<std::unique_ptr<JobRuntime>> MakeCollectiveJob(const plan::Plan& plan,
                                                              JobOptions options) {
  return JobRuntime::Create(plan, &CollectiveTestRegistry(), MakeActorFactory(),
                            std::move(options));
}

std::vector<double> ToDoubles(const void* data, plan::DataType data_type, int64_t count) {
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i) {
    switch (data_type) {
      case plan::FLOAT32:
        values[i] = static_cast<const float*>(data)[i];
        break;
      case plan::INT32:
        values[i] = static_cast<const int32_t*>(data)[i];
        break;
      case plan::INT64:
        values[i] = static_cast<double>(static_cast<const int64_t*>(data)[i]);
        break;
      case plan::UINT8:
        values[i] = static_cast<const uint8_t*>(data)[i];
        break;
      case plan::UINT16:
        values[i] = static_cast<const uint16_t*>(data)[i];
        break;
      default:
        ADD_FAILURE() << "unsupported data type";
    }
  }
  return values;
}

std::vector<double> ToDoubles(const HostTensor& tensor) {
  return ToDoubles(tensor.bytes.data(), tensor.data_type, tensor.shape.NumElements());
}

// ---------------------------------------------------------------------------------------------
// The reference semantics (plan.proto's CollectiveKind), element by element.

std::pair<int64_t, int64_t> SliceOf(int64_t length, int64_t parts, int64_t index) {
  int64_t begin = 0;
  for (int64_t part = 0; part < index; ++part) begin += length / parts + (part < length % parts);
  return {begin, length / parts + (index < length % parts)};
}

Shape ReferenceOutputShape(const CollectiveCase& c, int rank) {
  const int k = NumRanks(c);
  Shape shape = c.inputs[0];
  switch (c.kind) {
    case plan::ALL_REDUCE:
      return shape;
    case plan::REDUCE_SCATTER:
      shape.set_dimension(c.axis, SliceOf(shape.dimension(c.axis), k, rank).second);
      return shape;
    case plan::ALL_GATHER: {
      int64_t total = 0;
      for (const Shape& input : c.inputs) total += input.dimension(c.axis);
      shape.set_dimension(c.axis, total);
      return shape;
    }
    case plan::ALL_TO_ALL: {
      int64_t total = 0;
      for (const Shape& input : c.inputs) {
        Shape slice = input;
        slice.set_dimension(c.axis, SliceOf(input.dimension(c.axis), k, rank).second);
        total += slice.dimension(c.concat_axis);
        shape = slice;
      }
      shape.set_dimension(c.concat_axis, total);
      return shape;
    }
    default:
      ADD_FAILURE();
      return shape;
  }
}

ReferenceTensor ReferenceOutput(const CollectiveCase& c, const std::vector<ReferenceTensor>& inputs,
                                int rank) {
  const int k = NumRanks(c);
  ReferenceTensor out;
  out.shape = ReferenceOutputShape(c, rank);
  out.values.resize(out.shape.NumElements());
  for (int64_t flat = 0; flat < out.shape.NumElements(); ++flat) {
    std::vector<int64_t> index = out.Unravel(flat);
    double value = 0;
    switch (c.kind) {
      case plan::ALL_REDUCE:
      case plan::REDUCE_SCATTER: {
        if (c.kind == plan::REDUCE_SCATTER) {
          index[c.axis] += SliceOf(c.inputs[0].dimension(c.axis), k, rank).first;
        }
        value = inputs[0].At(index);
        for (int source = 1; source < k; ++source) {
          double other = inputs[source].At(index);
          value = c.reduce == plan::REDUCE_MAX ? std::max(value, other) : value + other;
        }
        break;
      }
      case plan::ALL_GATHER: {
        int source = 0;
        while (index[c.axis] >= inputs[source].shape.dimension(c.axis)) {
          index[c.axis] -= inputs[source].shape.dimension(c.axis);
          ++source;
        }
        value = inputs[source].At(index);
        break;
      }
      case plan::ALL_TO_ALL: {
        int source = 0;
        while (true) {
          auto [begin, size] = SliceOf(inputs[source].shape.dimension(c.axis), k, rank);
          int64_t extent =
              c.concat_axis == c.axis ? size : inputs[source].shape.dimension(c.concat_axis);
          if (index[c.concat_axis] < extent) {
            index[c.axis] += begin;
            break;
          }
          index[c.concat_axis] -= extent;
          ++source;
        }
        value = inputs[source].At(index);
        break;
      }
      default:
        ADD_FAILURE();
    }
    out.values[flat] = value;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Plans.

plan::Device CpuDevice(int index) {
  plan::Device device;
  device.set_type(plan::CPU);
  device.set_index(index);
  return device;
}

void AddCommunicator(PlanBuilder& builder, const std::string& name, std::vector<int> devices,
                     int num_collectives) {
  plan::Communicator* communicator = builder.mutable_plan().add_communicators();
  communicator->set_name(name);
  for (int device : devices) *communicator->add_devices() = CpuDevice(device);
  communicator->set_num_collectives(num_collectives);
}

plan::CollectiveConf Conf(const std::string& communicator, plan::CollectiveKind kind,
                          int64_t sequence, const std::string& name) {
  plan::CollectiveConf conf;
  conf.set_communicator(communicator);
  conf.set_kind(kind);
  conf.set_sequence(sequence);
  conf.set_name(name);
  return conf;
}

plan::Task& AddCollective(PlanBuilder& builder, const std::string& name, int device,
                          const std::string& input, const std::string& output,
                          const plan::CollectiveConf& conf, int rank) {
  plan::Task& task = builder.AddTask(name, plan::COLLECTIVE, device, {input}, {output});
  task.mutable_stream()->set_kind(plan::STREAM_COMMUNICATION);
  *task.mutable_collective() = conf;
  task.set_rank(rank);
  return task;
}

std::vector<int64_t> Dimensions(const Shape& shape) {
  return std::vector<int64_t>(shape.dimensions().begin(), shape.dimensions().end());
}

plan::Plan CasePlan(const CollectiveCase& c) {
  PlanBuilder builder(c.label);
  const int k = NumRanks(c);
  builder.AddCpuDevices(k);
  std::vector<int> devices;
  for (int rank = 0; rank < k; ++rank) devices.push_back(rank);
  AddCommunicator(builder, "group", devices, 1);
  plan::CollectiveConf conf = Conf("group", c.kind, 0, c.label);
  conf.set_reduce(c.reduce);
  conf.set_axis(c.axis);
  conf.set_concat_axis(c.concat_axis);
  for (int rank = 0; rank < k; ++rank) {
    const std::string in = absl::StrCat("in", rank);
    const std::string out = absl::StrCat("out", rank);
    builder.AddRegister(in, Dimensions(c.inputs[rank]), c.data_type, 2);
    builder.AddRegister(out, Dimensions(ReferenceOutputShape(c, rank)), c.data_type, 2);
    const bool random = c.data_type == plan::FLOAT32;
    plan::Task& source = builder.AddTask(absl::StrCat("source", rank), plan::SOURCE, rank, {}, {in},
                                         random ? "random" : "test_pattern");
    source.set_num_pieces(c.pieces);
    PlanBuilder::SetAttribute(source, "seed", 100 + rank);
    if (random) {
      PlanBuilder::SetFloatAttribute(source, "low", -1.0);
      PlanBuilder::SetFloatAttribute(source, "high", 1.0);
    }
    AddCollective(builder, absl::StrCat("collective", rank), rank, in, out, conf, rank);
    builder.AddTask(absl::StrCat("sink", rank), plan::SINK, rank, {in, out}, {});
  }
  return builder.plan();
}

void RunAndCheck(const CollectiveCase& c) {
  SCOPED_TRACE(c.label);
  auto job = MakeCollectiveJob(CasePlan(c));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  const int k = NumRanks(c);
  std::vector<const std::vector<std::vector<HostTensor>>*> kept(k);
  for (int rank = 0; rank < k; ++rank) {
    auto pieces = FetchedPieces(**job, absl::StrCat("sink", rank));
    ASSERT_TRUE(pieces.ok()) << pieces.status();
    kept[rank] = *pieces;
    ASSERT_EQ((*kept[rank])[0].size(), static_cast<size_t>(c.pieces));
  }
  const double tolerance = IsReduction(c.kind) ? 1e-5 : 0.0;
  for (int piece = 0; piece < c.pieces; ++piece) {
    std::vector<ReferenceTensor> inputs(k);
    for (int rank = 0; rank < k; ++rank) {
      inputs[rank].shape = c.inputs[rank];
      inputs[rank].values = ToDoubles((*kept[rank])[0][piece]);
    }
    for (int rank = 0; rank < k; ++rank) {
      ReferenceTensor expected = ReferenceOutput(c, inputs, rank);
      const HostTensor& actual = (*kept[rank])[1][piece];
      ASSERT_EQ(actual.shape, expected.shape) << "rank " << rank;
      std::vector<double> values = ToDoubles(actual);
      for (size_t i = 0; i < values.size(); ++i) {
        ASSERT_NEAR(values[i], expected.values[i], tolerance)
            << "rank " << rank << " piece " << piece << " element " << i;
      }
    }
  }
}

std::vector<Shape> SplitShapes(std::vector<int64_t> logical, int axis, int parts) {
  std::vector<Shape> shapes;
  for (int rank = 0; rank < parts; ++rank) {
    Shape shape(logical);
    shape.set_dimension(axis, SliceOf(logical[axis], parts, rank).second);
    shapes.push_back(shape);
  }
  return shapes;
}

std::vector<Shape> SameShapes(std::vector<int64_t> shape, int parts) {
  return std::vector<Shape>(parts, Shape(shape));
}

// ---------------------------------------------------------------------------------------------
// Local order.

plan::Plan TwoCollectivesPlan(int pieces) {
  PlanBuilder builder("two_collectives");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "tp", {0, 1}, 2);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    builder.AddRegister("fast_in" + r, {6}).AddRegister("fast_out" + r, {6});
    builder.AddRegister("raw" + r, {4}).AddRegister("slow_in" + r, {4});
    builder.AddRegister("slow_out" + r, {4});
    AddCollective(builder, "second" + r, rank, "fast_in" + r, "fast_out" + r,
                  Conf("tp", plan::ALL_REDUCE, 1, "second"), rank);
    plan::Task& fast =
        builder.AddTask("fast_source" + r, plan::SOURCE, rank, {}, {"fast_in" + r}, "test_pattern");
    fast.set_num_pieces(pieces);
    PlanBuilder::SetAttribute(fast, "seed", 10 + rank);
    plan::Task& raw =
        builder.AddTask("raw_source" + r, plan::SOURCE, rank, {}, {"raw" + r}, "test_pattern");
    raw.set_num_pieces(pieces);
    PlanBuilder::SetAttribute(raw, "seed", 20 + rank);
    plan::Task& slow =
        builder.AddTask("slow" + r, plan::COMPUTE, rank, {"raw" + r}, {"slow_in" + r}, "sleep");
    PlanBuilder::SetAttribute(slow, "microseconds", 3000);
    AddCollective(builder, "first" + r, rank, "slow_in" + r, "slow_out" + r,
                  Conf("tp", plan::ALL_REDUCE, 0, "first"), rank);
    builder.AddTask("sink" + r, plan::SINK, rank, {"slow_out" + r, "fast_out" + r}, {});
  }
  return builder.plan();
}

}  // namespace loom::testing
