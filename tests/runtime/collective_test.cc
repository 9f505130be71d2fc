// Collectives as actors over the shared-memory backend: every kind against a reference computed
// here, the local order, the cross-rank sequence check, aborts, deadlines and plan validation.
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/attributes.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/balanced_split.h"
#include "runtime/block_copy.h"
#include "runtime/collective_backend.h"
#include "runtime/collective_shapes.h"
#include "runtime/data_type.h"
#include "runtime/plan_validation.h"
#include "runtime/runtime_metrics.h"
#include "runtime/shared_memory_collectives.h"
#include "tests/runtime/runtime_test_util.h"
#include "tests/runtime/test_kernels.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
// Test data: a kernel that fills any data type with small integers (exact in every type), and
// helpers to read tensors of any type as doubles.

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
                                                              JobOptions options = {}) {
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

// A dense tensor of doubles with naive multi-index access: the reference side.
struct ReferenceTensor {
  Shape shape;
  std::vector<double> values;

  std::vector<int64_t> Unravel(int64_t flat) const {
    std::vector<int64_t> index(shape.rank());
    for (int axis = shape.rank() - 1; axis >= 0; --axis) {
      index[axis] = flat % shape.dimension(axis);
      flat /= shape.dimension(axis);
    }
    return index;
  }
  int64_t Ravel(const std::vector<int64_t>& index) const {
    int64_t flat = 0;
    for (int axis = 0; axis < shape.rank(); ++axis) {
      EXPECT_GE(index[axis], 0);
      EXPECT_LT(index[axis], shape.dimension(axis));
      flat = flat * shape.dimension(axis) + index[axis];
    }
    return flat;
  }
  double At(const std::vector<int64_t>& index) const { return values[Ravel(index)]; }
};

// ---------------------------------------------------------------------------------------------
// The reference semantics (plan.proto's CollectiveKind), element by element.

struct CollectiveCase {
  std::string label;
  plan::CollectiveKind kind = plan::ALL_REDUCE;
  plan::ReduceOperation reduce = plan::REDUCE_SUM;
  int axis = 0;
  int concat_axis = 0;
  std::vector<Shape> inputs;  // by rank
  plan::DataType data_type = plan::FLOAT32;
  int pieces = 3;
};

int NumRanks(const CollectiveCase& c) { return static_cast<int>(c.inputs.size()); }

// The slice along `axis` of `length` entries that part `index` of `parts` holds. Written out here
// (not BalancedRange) so that the test checks the rule rather than repeats it: the first
// length % parts parts hold one more.
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

// Per rank r: a source of the rank's input (the "random" kernel with seed 100 + r for float32,
// "test_pattern" otherwise) on cpu:r's compute stream, the collective on its communication
// stream, and a sink keeping [input, output] of every piece.
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

// Runs the case's plan and compares every piece of every rank's output with the reference.
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

// The balanced split of a logical axis of `length` over `parts` ranks, as per-rank shapes.
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
// Building blocks.

TEST(BalancedRangeTest, TheRemainderGoesToTheFirstParts) {
  const int64_t expected_7_over_3[][2] = {{0, 3}, {3, 5}, {5, 7}};
  for (int index = 0; index < 3; ++index) {
    EXPECT_EQ(BalancedRange(7, 3, index).begin, expected_7_over_3[index][0]);
    EXPECT_EQ(BalancedRange(7, 3, index).end, expected_7_over_3[index][1]);
  }
  const int64_t expected_7_over_4[][2] = {{0, 2}, {2, 4}, {4, 6}, {6, 7}};
  for (int index = 0; index < 4; ++index) {
    EXPECT_EQ(BalancedRange(7, 4, index).begin, expected_7_over_4[index][0]);
    EXPECT_EQ(BalancedRange(7, 4, index).end, expected_7_over_4[index][1]);
  }
  EXPECT_EQ(BalancedRange(2, 4, 3).size(), 0);
  for (int64_t length : {0, 1, 5, 8, 13}) {
    for (int64_t parts : {1, 2, 3, 5}) {
      int64_t next = 0;
      for (int64_t index = 0; index < parts; ++index) {
        EXPECT_EQ(BalancedRange(length, parts, index).begin, next);
        EXPECT_EQ(BalancedRange(length, parts, index).size(), SliceOf(length, parts, index).second);
        next = BalancedRange(length, parts, index).end;
      }
      EXPECT_EQ(next, length);
    }
  }
}

TEST(BlockCopyTest, CopiesBlocksAlongEveryAxisLikeANaiveLoop) {
  const Shape source_shape{3, 4, 5};
  std::vector<int32_t> source(source_shape.NumElements());
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<int32_t>(i);
  const Shape destination_shape{4, 6, 5};
  for (int axis = 0; axis < 3; ++axis) {
    for (int destination_axis = 0; destination_axis < 3; ++destination_axis) {
      Shape block = source_shape;
      block.set_dimension(axis, 2);
      std::vector<int32_t> destination(destination_shape.NumElements(), -1);
      auto source_origin = AxisOrigin(3, axis, 1);
      auto destination_origin = AxisOrigin(3, destination_axis, 1);
      bool fits = true;
      for (int a = 0; a < 3; ++a) {
        fits = fits && destination_origin[a] + block.dimension(a) <= destination_shape.dimension(a);
      }
      if (!fits) continue;
      CopyBlock(TensorView{source.data(), plan::INT32, source_shape}, source_origin,
                TensorView{destination.data(), plan::INT32, destination_shape}, destination_origin,
                block);
      ReferenceTensor from{source_shape, {}};
      ReferenceTensor to{destination_shape, {}};
      for (int64_t flat = 0; flat < block.NumElements(); ++flat) {
        ReferenceTensor block_index{block, {}};
        std::vector<int64_t> index = block_index.Unravel(flat);
        std::vector<int64_t> at_source = index;
        std::vector<int64_t> at_destination = index;
        for (int a = 0; a < 3; ++a) {
          at_source[a] += source_origin[a];
          at_destination[a] += destination_origin[a];
        }
        ASSERT_EQ(destination[to.Ravel(at_destination)], source[from.Ravel(at_source)])
            << "axis " << axis << " destination axis " << destination_axis;
        destination[to.Ravel(at_destination)] = -1;
      }
      // Nothing outside the block was written.
      for (int32_t value : destination) ASSERT_EQ(value, -1);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Every kind, numerically, on 2, 3 and 4 ranks.

TEST(CollectiveTest, AllReduceSumAndMax) {
  for (int k : {2, 3, 4}) {
    for (plan::ReduceOperation reduce : {plan::REDUCE_SUM, plan::REDUCE_MAX}) {
      for (std::vector<int64_t> shape : {std::vector<int64_t>{5, 7}, std::vector<int64_t>{3}}) {
        CollectiveCase c;
        c.label = absl::StrCat("all_reduce_", k, "_", reduce, "_", shape.size());
        c.kind = plan::ALL_REDUCE;
        c.reduce = reduce;
        c.inputs = SameShapes(shape, k);
        RunAndCheck(c);
      }
    }
  }
}

TEST(CollectiveTest, AllGatherEvenAndUnevenAlongEveryAxis) {
  for (int k : {2, 3, 4}) {
    // Axis length 7 (uneven over 2, 3 and 4) on the leading, a middle and the last axis; 8 even.
    const std::vector<std::pair<std::vector<int64_t>, int>> cases = {
        {{7, 3}, 0}, {{2, 7, 3}, 1}, {{2, 3, 7}, 2}, {{8, 2}, 0}};
    for (const auto& [logical, axis] : cases) {
      CollectiveCase c;
      c.label = absl::StrCat("all_gather_", k, "_axis", axis, "_", logical[axis]);
      c.kind = plan::ALL_GATHER;
      c.axis = axis;
      c.inputs = SplitShapes(logical, axis, k);
      RunAndCheck(c);
    }
  }
}

TEST(CollectiveTest, ReduceScatterEvenAndUnevenAlongEveryAxis) {
  for (int k : {2, 3, 4}) {
    const std::vector<std::pair<std::vector<int64_t>, int>> cases = {
        {{7, 3}, 0}, {{2, 7, 3}, 1}, {{3, 7}, 1}, {{8}, 0}};
    for (const auto& [shape, axis] : cases) {
      for (plan::ReduceOperation reduce : {plan::REDUCE_SUM, plan::REDUCE_MAX}) {
        CollectiveCase c;
        c.label = absl::StrCat("reduce_scatter_", k, "_axis", axis, "_", reduce);
        c.kind = plan::REDUCE_SCATTER;
        c.reduce = reduce;
        c.axis = axis;
        c.inputs = SameShapes(shape, k);
        RunAndCheck(c);
      }
    }
  }
}

TEST(CollectiveTest, AllToAllBetweenSplitsOfUnevenAxes) {
  for (int k : {2, 3, 4}) {
    // S(concat_axis) -> S(axis) of a logical [7, 5, 6] tensor, and the same-axis form.
    struct Axes {
      int axis;
      int concat_axis;
    };
    for (Axes axes : {Axes{1, 0}, Axes{0, 1}, Axes{2, 1}, Axes{0, 2}}) {
      CollectiveCase c;
      c.label = absl::StrCat("all_to_all_", k, "_split", axes.axis, "_concat", axes.concat_axis);
      c.kind = plan::ALL_TO_ALL;
      c.axis = axes.axis;
      c.concat_axis = axes.concat_axis;
      c.inputs = SplitShapes({7, 5, 6}, axes.concat_axis, k);
      RunAndCheck(c);
    }
    CollectiveCase same_axis;
    same_axis.label = absl::StrCat("all_to_all_", k, "_same_axis");
    same_axis.kind = plan::ALL_TO_ALL;
    same_axis.axis = 1;
    same_axis.concat_axis = 1;
    same_axis.inputs = SameShapes({2, 7, 3}, k);
    RunAndCheck(same_axis);
  }
}

TEST(CollectiveTest, GatherAndAllToAllMoveAnyDataType) {
  for (int k : {2, 3}) {
    for (plan::DataType data_type : {plan::INT64, plan::INT32, plan::UINT8, plan::UINT16}) {
      CollectiveCase gather;
      gather.label = absl::StrCat("gather_", DataTypeName(data_type), "_", k);
      gather.kind = plan::ALL_GATHER;
      gather.axis = 1;
      gather.data_type = data_type;
      gather.inputs = SplitShapes({3, 7}, 1, k);
      RunAndCheck(gather);

      CollectiveCase all_to_all;
      all_to_all.label = absl::StrCat("all_to_all_", DataTypeName(data_type), "_", k);
      all_to_all.kind = plan::ALL_TO_ALL;
      all_to_all.axis = 1;
      all_to_all.concat_axis = 0;
      all_to_all.data_type = data_type;
      all_to_all.inputs = SplitShapes({5, 7}, 0, k);
      RunAndCheck(all_to_all);
    }
  }
}

TEST(CollectiveTest, ManyPiecesThroughOneCollective) {
  CollectiveCase c;
  c.label = "many_pieces";
  c.kind = plan::ALL_REDUCE;
  c.inputs = SameShapes({64}, 3);
  c.pieces = 50;
  RunAndCheck(c);
}

TEST(CollectiveTest, ASingleRankCommunicatorCopies) {
  CollectiveCase c;
  c.label = "single_rank";
  c.kind = plan::ALL_GATHER;
  c.axis = 1;
  c.inputs = SameShapes({2, 3}, 1);
  RunAndCheck(c);
}

// ---------------------------------------------------------------------------------------------
// Local order.

// Two all-reduces on one communicator of 2 ranks. Sequence 0's input is slow (a 3 ms sleep per
// piece), sequence 1's is ready at once, and sequence 1's task comes first in the plan: each rank
// must still run 0, 1, 0, 1, ...
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

TEST(CollectiveOrderTest, CollectivesActInSequenceOrderEvenWhenALaterInputIsReadyFirst) {
  const int pieces = 6;
  auto job = MakeCollectiveJob(TwoCollectivesPlan(pieces));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    std::vector<ActEvent> first = EventsOf(**job, "first" + r);
    std::vector<ActEvent> second = EventsOf(**job, "second" + r);
    ASSERT_EQ(first.size(), static_cast<size_t>(pieces));
    ASSERT_EQ(second.size(), static_cast<size_t>(pieces));
    for (int piece = 0; piece < pieces; ++piece) {
      EXPECT_EQ(first[piece].piece, piece);
      EXPECT_EQ(second[piece].piece, piece);
      // first(p) < second(p) < first(p + 1).
      EXPECT_LE(first[piece].end_nanoseconds, second[piece].start_nanoseconds) << piece;
      if (piece + 1 < pieces) {
        EXPECT_LE(second[piece].end_nanoseconds, first[piece + 1].start_nanoseconds) << piece;
      }
    }
  }
  // The values: each output is the sum of both ranks' pattern inputs.
  for (int rank = 0; rank < 2; ++rank) {
    auto kept = FetchedPieces(**job, absl::StrCat("sink", rank));
    ASSERT_TRUE(kept.ok());
    for (int piece = 0; piece < pieces; ++piece) {
      std::vector<double> slow = ToDoubles((**kept)[0][piece]);
      std::vector<double> fast = ToDoubles((**kept)[1][piece]);
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(slow[i],
                  (20 * 131 + piece * 17 + i * 7) % 251 + (21 * 131 + piece * 17 + i * 7) % 251);
      }
      for (int i = 0; i < 6; ++i) {
        EXPECT_EQ(fast[i],
                  (10 * 131 + piece * 17 + i * 7) % 251 + (11 * 131 + piece * 17 + i * 7) % 251);
      }
    }
  }
}

TEST(CollectiveOrderTest, CollectivesWithFewerPiecesEndTheOrderCleanly) {
  // Sequence 1 gets 2 pieces, sequence 0 gets 3: every rank runs 0, 1, 0, 1, 0 and then stops.
  plan::Plan plan = TwoCollectivesPlan(3);
  for (plan::Task& task : *plan.mutable_tasks()) {
    if (task.name().rfind("fast_source", 0) == 0) task.set_num_pieces(2);
  }
  auto job = MakeCollectiveJob(plan);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(EventsOf(**job, absl::StrCat("first", rank)).size(), 3u);
    EXPECT_EQ(EventsOf(**job, absl::StrCat("second", rank)).size(), 2u);
  }
}

TEST(CollectiveOrderTest, NoPiecesAtAllEndsCleanly) {
  CollectiveCase c;
  c.label = "no_pieces";
  c.kind = plan::ALL_REDUCE;
  c.inputs = SameShapes({4}, 3);
  c.pieces = 0;
  auto job = MakeCollectiveJob(CasePlan(c));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE((*job)->Run().ok());
}

TEST(CollectiveOrderTest, AStallReportSaysWhichCollectiveWaitsForItsTurn) {
  // One rank. Sequence 0's input never comes (the stall of failure_test: 'late' waits for a sum
  // that can never complete); sequence 1's input is ready, but it is not its turn.
  PlanBuilder builder("turn_stall");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "solo", {0}, 2);
  builder.AddRegister("x", {2}, plan::FLOAT32, 1)
      .AddRegister("sum", {2})
      .AddRegister("late_out", {2});
  builder.AddRegister("ready", {2}).AddRegister("out0", {2}).AddRegister("out1", {2});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(8);
  builder.AddTask("accumulate", plan::ACCUMULATE, 1, {"x"}, {"sum"}).set_factor(4);
  builder.AddTask("late", plan::COMPUTE, 0, {"x", "sum"}, {"late_out"}, "test_sum_plus_one");
  builder.AddTask("ready_source", plan::SOURCE, 0, {}, {"ready"}, "test_piece").set_num_pieces(8);
  AddCollective(builder, "zero", 0, "late_out", "out0", Conf("solo", plan::ALL_REDUCE, 0, "zero"),
                0);
  AddCollective(builder, "one", 0, "ready", "out1", Conf("solo", plan::ALL_REDUCE, 1, "one"), 0);
  JobOptions options;
  options.stall_timeout = absl::Milliseconds(300);
  auto job = MakeCollectiveJob(builder.plan(), options);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status status = (*job)->Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(),
              HasSubstr("'one' waits for its turn on communicator 'solo': collective 'one' "
                        "(sequence 1) comes after sequence 0 ('zero')"));
  EXPECT_THAT(status.message(), HasSubstr("'zero' waits for input register 'late_out'"));
}

// ---------------------------------------------------------------------------------------------
// The backend directly: the sequence check, aborts, deadlines, many consecutive collectives.

plan::Communicator TestCommunicator(int size, int num_collectives) {
  plan::Communicator communicator;
  communicator.set_name("tp0");
  for (int rank = 0; rank < size; ++rank) *communicator.add_devices() = CpuDevice(rank);
  communicator.set_num_collectives(num_collectives);
  return communicator;
}

SharedMemoryCollectives::Options BackendOptions(absl::Duration timeout) {
  SharedMemoryCollectives::Options options;
  options.timeout = timeout;
  return options;
}

TEST(SharedMemoryCollectivesTest, RanksRunningDifferentCollectivesFailNamingBoth) {
  SharedMemoryCollectives backend(TestCommunicator(2, 2), BackendOptions(absl::Seconds(60)));
  plan::CollectiveConf first = Conf("tp0", plan::ALL_REDUCE, 0, "allreduce_a");
  plan::CollectiveConf second = Conf("tp0", plan::ALL_REDUCE, 1, "allreduce_b");
  std::vector<float> in0(4, 1.0f), in1(4, 2.0f), out0(4), out1(4);
  absl::Status status0, status1;
  std::thread rank1([&] {
    status1 = backend.Run(CollectiveCall{1, &second, 0, TensorView{in1.data(), plan::FLOAT32, {4}},
                                         TensorView{out1.data(), plan::FLOAT32, {4}}});
  });
  status0 = backend.Run(CollectiveCall{0, &first, 0, TensorView{in0.data(), plan::FLOAT32, {4}},
                                       TensorView{out0.data(), plan::FLOAT32, {4}}});
  rank1.join();
  for (const absl::Status& status : {status0, status1}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
    EXPECT_THAT(status.message(),
                HasSubstr("communicator 'tp0': rank 0 runs collective 'allreduce_a' (sequence 0) "
                          "while rank 1 runs 'allreduce_b' (sequence 1)"));
  }
  // The failure is permanent.
  EXPECT_EQ(backend
                .Run(CollectiveCall{0, &first, 1, TensorView{in0.data(), plan::FLOAT32, {4}},
                                    TensorView{out0.data(), plan::FLOAT32, {4}}})
                .code(),
            absl::StatusCode::kInternal);
}

TEST(SharedMemoryCollectivesTest, AllRanksSkippingTheOrderIsCaughtToo) {
  // Both ranks agree, but on sequence 1 where the communicator's order puts sequence 0.
  SharedMemoryCollectives backend(TestCommunicator(2, 2), BackendOptions(absl::Seconds(60)));
  plan::CollectiveConf second = Conf("tp0", plan::ALL_REDUCE, 1, "allreduce_b");
  std::vector<float> in0(4), in1(4), out0(4), out1(4);
  absl::Status status1;
  std::thread rank1([&] {
    status1 = backend.Run(CollectiveCall{1, &second, 0, TensorView{in1.data(), plan::FLOAT32, {4}},
                                         TensorView{out1.data(), plan::FLOAT32, {4}}});
  });
  absl::Status status0 =
      backend.Run(CollectiveCall{0, &second, 0, TensorView{in0.data(), plan::FLOAT32, {4}},
                                 TensorView{out0.data(), plan::FLOAT32, {4}}});
  rank1.join();
  EXPECT_EQ(status0.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(status0.message(), HasSubstr("puts sequence 0"));
  EXPECT_EQ(status1, status0);
}

TEST(SharedMemoryCollectivesTest, ShapesThatDoNotFitTogetherFailEveryRank) {
  // Rank 1's output is one row short of the gather of both inputs.
  SharedMemoryCollectives backend(TestCommunicator(2, 1), BackendOptions(absl::Seconds(60)));
  plan::CollectiveConf conf = Conf("tp0", plan::ALL_GATHER, 0, "gather");
  std::vector<float> in0(6), in1(6), out0(12), out1(9);
  absl::Status status1;
  std::thread rank1([&] {
    status1 = backend.Run(CollectiveCall{1, &conf, 0, TensorView{in1.data(), plan::FLOAT32, {2, 3}},
                                         TensorView{out1.data(), plan::FLOAT32, {3, 3}}});
  });
  absl::Status status0 =
      backend.Run(CollectiveCall{0, &conf, 0, TensorView{in0.data(), plan::FLOAT32, {2, 3}},
                                 TensorView{out0.data(), plan::FLOAT32, {4, 3}}});
  rank1.join();
  EXPECT_EQ(status0.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status0.message(), HasSubstr("collective 'gather' (sequence 0): rank 1's output is "
                                           "[3, 3] but the inputs give it [4, 3]"));
  EXPECT_EQ(status1, status0);
}

TEST(SharedMemoryCollectivesTest, AMissingRankEndsInADeadlineNamingIt) {
  SharedMemoryCollectives backend(TestCommunicator(3, 1), BackendOptions(absl::Milliseconds(200)));
  plan::CollectiveConf conf = Conf("tp0", plan::ALL_REDUCE, 0, "grads");
  std::vector<float> in(4), out(4);
  auto start = std::chrono::steady_clock::now();
  absl::Status status =
      backend.Run(CollectiveCall{1, &conf, 5, TensorView{in.data(), plan::FLOAT32, {4}},
                                 TensorView{out.data(), plan::FLOAT32, {4}}});
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("communicator 'tp0': collective 'grads' (sequence 0) "
                                          "on rank 1 waited 200ms at piece 5 for ranks 0, 2 to "
                                          "arrive"));
  EXPECT_GE(elapsed, std::chrono::milliseconds(190));
  EXPECT_LT(elapsed, std::chrono::seconds(5));
}

TEST(SharedMemoryCollectivesTest, AbortWakesAWaitingRank) {
  SharedMemoryCollectives backend(TestCommunicator(2, 1), BackendOptions(absl::Seconds(60)));
  plan::CollectiveConf conf = Conf("tp0", plan::ALL_GATHER, 0, "gather");
  std::vector<float> in(2), out(4);
  absl::Status status;
  auto start = std::chrono::steady_clock::now();
  std::thread rank0([&] {
    status = backend.Run(CollectiveCall{0, &conf, 0, TensorView{in.data(), plan::FLOAT32, {2}},
                                        TensorView{out.data(), plan::FLOAT32, {4}}});
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  backend.Abort(absl::CancelledError("the job failed elsewhere"));
  rank0.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(status.message(), HasSubstr("the job failed elsewhere"));
}

TEST(SharedMemoryCollectivesTest, ManyConsecutiveCollectivesDoNotMix) {
  // Ranks race through 300 all-reduces; each round's inputs depend on the round, so a rank reading
  // a peer's previous or next round would be caught.
  const int size = 4;
  const int rounds = 300;
  SharedMemoryCollectives backend(TestCommunicator(size, 3), BackendOptions(absl::Seconds(60)));
  std::vector<plan::CollectiveConf> confs;
  for (int sequence = 0; sequence < 3; ++sequence) {
    confs.push_back(Conf("tp0", plan::ALL_REDUCE, sequence, absl::StrCat("c", sequence)));
  }
  std::vector<std::thread> threads;
  std::vector<int> failures(size, 0);
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      std::vector<float> in(37), out(37);
      for (int round = 0; round < rounds; ++round) {
        for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(round * 10 + rank + i);
        absl::Status status = backend.Run(CollectiveCall{
            rank, &confs[round % 3], round, TensorView{in.data(), plan::FLOAT32, {37}},
            TensorView{out.data(), plan::FLOAT32, {37}}});
        if (!status.ok()) {
          ++failures[rank];
          return;
        }
        for (size_t i = 0; i < out.size(); ++i) {
          // sum over ranks of round * 10 + rank + i.
          float expected = static_cast<float>(size * (round * 10 + i) + size * (size - 1) / 2);
          if (out[i] != expected) ++failures[rank];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < size; ++rank) EXPECT_EQ(failures[rank], 0) << "rank " << rank;
}

// ---------------------------------------------------------------------------------------------
// Jobs that fail.

TEST(CollectiveFailureTest, AProducerFailingWhileAPeerWaitsEndsTheJobPromptlyWithItsError) {
  // Rank 1's input goes through a 20 ms sleep and then fails on piece 2, so rank 0 waits inside
  // the collective of piece 2 when the job fails; the abort must wake it long before the
  // collective timeout.
  PlanBuilder builder("abort_in_collective");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "dp", {0, 1}, 1);
  builder.AddRegister("in0", {8}).AddRegister("out0", {8});
  builder.AddRegister("raw1", {8}).AddRegister("slept1", {8}).AddRegister("in1", {8});
  builder.AddRegister("out1", {8});
  builder.AddTask("source0", plan::SOURCE, 0, {}, {"in0"}, "test_piece").set_num_pieces(5);
  builder.AddTask("source1", plan::SOURCE, 1, {}, {"raw1"}, "test_piece").set_num_pieces(5);
  plan::Task& sleep = builder.AddTask("sleep", plan::COMPUTE, 1, {"raw1"}, {"slept1"}, "sleep");
  PlanBuilder::SetAttribute(sleep, "microseconds", 20'000);
  plan::Task& failer =
      builder.AddTask("failer", plan::COMPUTE, 1, {"slept1"}, {"in1"}, "test_fail");
  PlanBuilder::SetAttribute(failer, "fail_piece", 2);
  AddCollective(builder, "reduce0", 0, "in0", "out0", Conf("dp", plan::ALL_REDUCE, 0, "grads"), 0);
  AddCollective(builder, "reduce1", 1, "in1", "out1", Conf("dp", plan::ALL_REDUCE, 0, "grads"), 1);
  builder.AddTask("sink0", plan::SINK, 0, {"out0"}, {});
  builder.AddTask("sink1", plan::SINK, 1, {"out1"}, {});
  JobOptions options;
  options.collective_timeout = absl::Seconds(60);
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto job = MakeCollectiveJob(builder.plan(), options);
    ASSERT_TRUE(job.ok()) << job.status();
    auto start = std::chrono::steady_clock::now();
    absl::Status status = (*job)->Run();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
    EXPECT_THAT(status.message(), HasSubstr("actor 'failer'"));
    EXPECT_THAT(status.message(), HasSubstr("injected failure at piece 2"));
    // Rank 0 was inside the collective of piece 2 (its act is recorded, ended by the abort), and
    // nothing after the failure reached a sink.
    std::vector<ActEvent> acts = EventsOf(**job, "reduce0");
    ASSERT_EQ(acts.size(), 3u);
    EXPECT_EQ(acts[2].piece, 2);
    EXPECT_GE(acts[2].end_nanoseconds - acts[2].start_nanoseconds, 10'000'000);
    EXPECT_LE(SinkValues(**job, "sink0").size(), 2u);
    EXPECT_LE(SinkValues(**job, "sink1").size(), 2u);
  }
}

TEST(CollectiveFailureTest, ARankThatNeverArrivesEndsTheJobWithADeadlineNamingIt) {
  // Rank 1 runs 2 pieces, rank 0 runs 3: rank 0 waits for rank 1 at piece 2.
  CollectiveCase c;
  c.label = "unequal_ranks";
  c.kind = plan::ALL_REDUCE;
  c.inputs = SameShapes({4}, 2);
  plan::Plan plan = CasePlan(c);
  for (plan::Task& task : *plan.mutable_tasks()) {
    if (task.name() == "source1") task.set_num_pieces(2);
  }
  JobOptions options;
  options.collective_timeout = absl::Milliseconds(300);
  auto job = MakeCollectiveJob(plan, options);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status status = (*job)->Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("actor 'collective0'"));
  EXPECT_THAT(status.message(),
              HasSubstr("communicator 'group': collective 'unequal_ranks' (sequence 0) on rank 0 "
                        "waited 300ms at piece 2 for rank 1 to arrive"));
}

TEST(CollectiveFailureTest, ACommunicatorOnAnotherNodeNeedsAnotherBackend) {
  PlanBuilder builder("two_nodes");
  builder.AddCpuDevices(1);
  plan::Communicator* communicator = builder.mutable_plan().add_communicators();
  communicator->set_name("across");
  *communicator->add_devices() = CpuDevice(0);
  plan::Device remote = CpuDevice(0);
  remote.set_node(1);
  *communicator->add_devices() = remote;
  communicator->set_num_collectives(1);
  builder.AddRegister("in", {4}).AddRegister("out", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"in"}, "test_piece").set_num_pieces(1);
  AddCollective(builder, "reduce", 0, "in", "out", Conf("across", plan::ALL_REDUCE, 0, "r"), 0);
  auto job = MakeCollectiveJob(builder.plan());
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(job.status().message(), HasSubstr("communicator 'across' spans node 1"));
  EXPECT_THAT(job.status().message(), HasSubstr("UCX backend"));
}

// ---------------------------------------------------------------------------------------------
// Validation.

// Two ranks, two all-reduces ('a' then 'b') on communicator "tp".
PlanBuilder ValidPair() {
  PlanBuilder builder("pair");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "tp", {0, 1}, 2);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    builder.AddRegister("x" + r, {6}).AddRegister("y" + r, {6}).AddRegister("z" + r, {6});
    builder.AddTask("source" + r, plan::SOURCE, rank, {}, {"x" + r}, "test_piece")
        .set_num_pieces(2);
    AddCollective(builder, "a" + r, rank, "x" + r, "y" + r, Conf("tp", plan::ALL_REDUCE, 0, "a"),
                  rank);
    AddCollective(builder, "b" + r, rank, "y" + r, "z" + r, Conf("tp", plan::ALL_REDUCE, 1, "b"),
                  rank);
    builder.AddTask("sink" + r, plan::SINK, rank, {"z" + r}, {});
  }
  return builder;
}

plan::Task& TaskNamed(PlanBuilder& builder, const std::string& name) {
  for (plan::Task& task : *builder.mutable_plan().mutable_tasks()) {
    if (task.name() == name) return task;
  }
  ADD_FAILURE() << name;
  return *builder.mutable_plan().mutable_tasks(0);
}

void ExpectInvalid(const PlanBuilder& builder, const std::string& text) {
  absl::Status status = ValidatePlan(builder.plan());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(text));
}

TEST(CollectiveValidationTest, AValidPairRuns) {
  PlanBuilder builder = ValidPair();
  ASSERT_TRUE(ValidatePlan(builder.plan()).ok()) << ValidatePlan(builder.plan());
  auto job = MakeCollectiveJob(builder.plan());
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());
  // test_piece fills piece p with p; two all-reduces over 2 ranks multiply by 4.
  EXPECT_THAT(SinkValues(**job, "sink0"), ::testing::ElementsAre(0.0f, 4.0f));
  EXPECT_THAT(SinkValues(**job, "sink1"), ::testing::ElementsAre(0.0f, 4.0f));
}

TEST(CollectiveValidationTest, UnknownCommunicator) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "a1").mutable_collective()->set_communicator("dp");
  ExpectInvalid(builder,
                "task 'a1': collective on communicator 'dp', which the plan does not "
                "declare");
}

TEST(CollectiveValidationTest, MissingKind) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "a1").mutable_collective()->set_kind(plan::COLLECTIVE_KIND_UNSPECIFIED);
  ExpectInvalid(builder, "task 'a1': the collective has no kind");
}

TEST(CollectiveValidationTest, RankOutOfRange) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "a1").set_rank(2);
  ExpectInvalid(builder, "task 'a1': rank 2 is outside communicator 'tp' of 2 ranks");
}

TEST(CollectiveValidationTest, RankOnTheWrongDevice) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "a1").set_rank(0);
  ExpectInvalid(builder,
                "task 'a1': runs on node0/cpu:1 as rank 0 of communicator 'tp', whose "
                "rank 0 is node0/cpu:0");
}

TEST(CollectiveValidationTest, NotOnACommunicationStream) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "b0").mutable_stream()->set_kind(plan::STREAM_COMPUTE);
  ExpectInvalid(builder,
                "task 'b0': a collective runs on a communication stream, not on "
                "node0/cpu:0/compute");
}

TEST(CollectiveValidationTest, OneRanksCollectivesOnTwoStreams) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "b0").mutable_stream()->set_index(1);
  ExpectInvalid(builder, "share one communication stream");
}

TEST(CollectiveValidationTest, TwoCommunicatorsOnOneStream) {
  PlanBuilder builder = ValidPair();
  AddCommunicator(builder, "dp", {0, 1}, 1);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    builder.AddRegister("w" + r, {6});
    AddCollective(builder, "c" + r, rank, "z" + r, "w" + r, Conf("dp", plan::ALL_REDUCE, 0, "c"),
                  rank);
  }
  ExpectInvalid(builder, "each communicator needs its own communication stream");
}

TEST(CollectiveValidationTest, OtherTasksOnACollectiveStream) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "sink1").mutable_stream()->set_kind(plan::STREAM_COMMUNICATION);
  ExpectInvalid(builder,
                "task 'sink1' runs on node0/cpu:1/communication, which runs the "
                "collectives of communicator 'tp'");
}

TEST(CollectiveValidationTest, SequenceOutOfRange) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "b1").mutable_collective()->set_sequence(2);
  ExpectInvalid(builder, "task 'b1': sequence 2 is outside [0, 2) of communicator 'tp'");
}

TEST(CollectiveValidationTest, RanksListingDifferentSequencesAreRejected) {
  // Rank 1 runs 'b' first and 'a' second: a hang in the making.
  PlanBuilder builder = ValidPair();
  *TaskNamed(builder, "a1").mutable_collective() = Conf("tp", plan::ALL_REDUCE, 1, "a");
  *TaskNamed(builder, "b1").mutable_collective() = Conf("tp", plan::ALL_REDUCE, 0, "b");
  ExpectInvalid(builder,
                "task 'b1' (rank 1) runs all-reduce 'b' (sequence 0) sum while 'a0' "
                "(rank 0) runs all-reduce 'a' (sequence 0) sum");
}

TEST(CollectiveValidationTest, DifferentKindsAcrossRanks) {
  PlanBuilder builder = ValidPair();
  plan::CollectiveConf* conf = TaskNamed(builder, "a1").mutable_collective();
  conf->set_kind(plan::ALL_GATHER);
  // Make the shapes fit a gather of 2 x [6] locally (y1 and z1 become [12]), so that the
  // cross-rank check speaks.
  builder.mutable_plan().mutable_registers(4)->mutable_tensor()->set_shape(0, 12);
  builder.mutable_plan().mutable_registers(5)->mutable_tensor()->set_shape(0, 12);
  ExpectInvalid(builder,
                "task 'a1' (rank 1) runs all-gather 'a' (sequence 0) axis 0 while 'a0' "
                "(rank 0) runs all-reduce 'a' (sequence 0) sum");
}

TEST(CollectiveValidationTest, TwoTasksForOneRankAndSequence) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "b1").mutable_collective()->set_sequence(0);
  ExpectInvalid(builder, "task 'b1': both 'a1' and 'b1' are rank 1 of sequence 0");
}

TEST(CollectiveValidationTest, NoTaskForARank) {
  PlanBuilder builder = ValidPair();
  // Rank 1's sequence 1 task moves to another communicator of its own.
  AddCommunicator(builder, "solo", {1}, 1);
  TaskNamed(builder, "b1").mutable_collective()->set_communicator("solo");
  TaskNamed(builder, "b1").mutable_collective()->set_sequence(0);
  TaskNamed(builder, "b1").set_rank(0);
  TaskNamed(builder, "b1").mutable_stream()->set_index(1);
  ExpectInvalid(builder,
                "communicator 'tp': task 'b0' runs sequence 1 but no task runs it for "
                "rank 1 (node0/cpu:1)");
}

TEST(CollectiveValidationTest, AllReduceThatChangesTheShape) {
  PlanBuilder builder = ValidPair();
  // y0 (register 1) becomes [5].
  builder.mutable_plan().mutable_registers(1)->mutable_tensor()->set_shape(0, 5);
  ExpectInvalid(builder, "task 'a0': all-reduce on rank 0 of 2: input [6] and output [5] differ");
}

TEST(CollectiveValidationTest, ReductionOfIntegers) {
  PlanBuilder builder = ValidPair();
  for (int r : {0, 1, 2}) {
    builder.mutable_plan().mutable_registers(r)->mutable_tensor()->set_data_type(plan::INT64);
  }
  ExpectInvalid(builder, "task 'a0': all-reduce reduces float32 only, not int64");
}

TEST(CollectiveValidationTest, GatherWhoseOutputDoesNotMatchThePeers) {
  PlanBuilder builder("gather");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "tp", {0, 1}, 1);
  builder.AddRegister("x0", {4, 3}).AddRegister("x1", {3, 3});
  builder.AddRegister("y0", {7, 3}).AddRegister("y1", {8, 3});
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    builder.AddTask("source" + r, plan::SOURCE, rank, {}, {"x" + r}, "test_piece");
    plan::CollectiveConf conf = Conf("tp", plan::ALL_GATHER, 0, "gather");
    AddCollective(builder, "gather" + r, rank, "x" + r, "y" + r, conf, rank);
  }
  ExpectInvalid(builder,
                "task 'gather1': its output register 'y1' is [8, 3], but the all-gather "
                "of the ranks' inputs gives rank 1 [7, 3]");
}

TEST(CollectiveValidationTest, ReduceScatterSliceOfTheWrongSize) {
  PlanBuilder builder("scatter");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "tp", {0, 1}, 1);
  builder.AddRegister("x0", {7, 3}).AddRegister("x1", {7, 3});
  builder.AddRegister("y0", {3, 3}).AddRegister("y1", {3, 3});
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    builder.AddTask("source" + r, plan::SOURCE, rank, {}, {"x" + r}, "test_piece");
    AddCollective(builder, "scatter" + r, rank, "x" + r, "y" + r,
                  Conf("tp", plan::REDUCE_SCATTER, 0, "scatter"), rank);
  }
  ExpectInvalid(builder,
                "task 'scatter0': reduce-scatter on rank 0 of 2: input [7, 3] and output "
                "[3, 3] do not fit: rank 0 keeps 4 of the 7 entries along axis 0");
}

TEST(CollectiveValidationTest, AxisOutOfRange) {
  PlanBuilder builder("axis");
  builder.AddCpuDevices(2);
  AddCommunicator(builder, "tp", {0, 1}, 1);
  builder.AddRegister("x0", {2}).AddRegister("x1", {2});
  builder.AddRegister("y0", {4}).AddRegister("y1", {4});
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = absl::StrCat(rank);
    builder.AddTask("source" + r, plan::SOURCE, rank, {}, {"x" + r}, "test_piece");
    plan::CollectiveConf conf = Conf("tp", plan::ALL_GATHER, 0, "gather");
    conf.set_axis(1);
    AddCollective(builder, "gather" + r, rank, "x" + r, "y" + r, conf, rank);
  }
  ExpectInvalid(builder, "task 'gather0': all-gather axis 1 is out of range for [2]");
}

TEST(CollectiveValidationTest, WrongArity) {
  PlanBuilder builder = ValidPair();
  TaskNamed(builder, "a0").add_inputs("x1");
  ExpectInvalid(builder, "task 'a0': a collective task reads 1 registers, not 2");
}

// ---------------------------------------------------------------------------------------------
// Live metrics (JobOptions::metrics): the deltas add up to what the summaries say.

class CountingMetrics final : public RuntimeMetrics {
 public:
  void AddActs(plan::TaskKind kind, int64_t acts) override { acts_[kind] += acts; }
  void AddActorTime(plan::TaskKind kind, ActorTime time, int64_t nanoseconds) override {
    time_[kind][static_cast<int>(time)] += nanoseconds;
  }
  void AddQueuedMessages(plan::StreamKind stream, int64_t delta) override {
    queued_[stream] += delta;
    if (delta > 0) pushed_ += delta;
  }
  void AddTransferredBytes(absl::string_view, TransferDirection, int64_t) override {}
  void ObserveCollective(plan::CollectiveKind kind, absl::string_view backend, int64_t nanoseconds,
                         int64_t bytes) override {
    EXPECT_EQ(kind, plan::ALL_REDUCE);
    EXPECT_EQ(backend, "shared_memory");
    EXPECT_GT(nanoseconds, 0);
    ++collectives_;
    collective_bytes_ += bytes;
  }

  std::array<std::atomic<int64_t>, plan::TaskKind_ARRAYSIZE> acts_{};
  std::array<std::array<std::atomic<int64_t>, 4>, plan::TaskKind_ARRAYSIZE> time_{};
  std::array<std::atomic<int64_t>, plan::StreamKind_ARRAYSIZE> queued_{};
  std::atomic<int64_t> pushed_{0};
  std::atomic<int64_t> collectives_{0};
  std::atomic<int64_t> collective_bytes_{0};
};

TEST(RuntimeMetricsTest, LiveCountsAddUpToTheSummaries) {
  const int pieces = 6;
  CountingMetrics metrics;
  std::vector<ActorSummary> summaries;
  {
    JobOptions options;
    options.metrics = &metrics;
    auto job = MakeCollectiveJob(TwoCollectivesPlan(pieces), std::move(options));
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE((*job)->Run().ok());
    summaries = (*job)->Summaries();
  }  // the runtime is gone: whatever it left in inboxes left the queue gauge
  std::array<int64_t, plan::TaskKind_ARRAYSIZE> acts{};
  std::array<std::array<int64_t, 4>, plan::TaskKind_ARRAYSIZE> time{};
  for (const ActorSummary& summary : summaries) {
    acts[summary.kind] += summary.acts;
    time[summary.kind][static_cast<int>(ActorTime::kBusy)] += summary.busy_nanoseconds;
    time[summary.kind][static_cast<int>(ActorTime::kBlockedOnInput)] +=
        summary.blocked_on_input_nanoseconds;
    time[summary.kind][static_cast<int>(ActorTime::kBlockedOnOutput)] +=
        summary.blocked_on_output_nanoseconds;
    time[summary.kind][static_cast<int>(ActorTime::kWaitingForThread)] +=
        summary.waiting_for_thread_nanoseconds;
  }
  for (int kind = 0; kind < plan::TaskKind_ARRAYSIZE; ++kind) {
    EXPECT_EQ(metrics.acts_[kind].load(), acts[kind]) << plan::TaskKind_Name(kind);
    for (int part = 0; part < 4; ++part) {
      EXPECT_EQ(metrics.time_[kind][part].load(), time[kind][part])
          << plan::TaskKind_Name(kind) << " time " << part;
    }
  }
  EXPECT_EQ(metrics.acts_[plan::COLLECTIVE].load(), 2 * 2 * pieces);
  EXPECT_GT(metrics.time_[plan::COMPUTE][static_cast<int>(ActorTime::kBusy)].load(),
            pieces * 3'000'000);  // the 3 ms sleeps
  EXPECT_EQ(metrics.collectives_.load(), 2 * 2 * pieces);
  // Per rank and piece: 6 + 4 float32 elements.
  EXPECT_EQ(metrics.collective_bytes_.load(), 2 * pieces * (6 + 4) * 4);
  EXPECT_GT(metrics.pushed_.load(), 0);
  for (int stream = 0; stream < plan::StreamKind_ARRAYSIZE; ++stream) {
    EXPECT_EQ(metrics.queued_[stream].load(), 0) << plan::StreamKind_Name(stream);
  }
}

}  // namespace
}  // namespace loom::testing
