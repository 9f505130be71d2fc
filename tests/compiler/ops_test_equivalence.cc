// Every SBP signature of every op of compiler/ops/, lowered and run with the CPU kernels on k
// devices, computes what one device computes (DESIGN.md §8 "equivalence", at the scale of one op):
// inputs are cut per the signature (S: balanced slices, B: whole, P: random parts that sum to the
// value), each rank runs the kernel its Lower configures, and the outputs are put back together
// (S: concatenated, B: each equal, P: summed) and compared with the one-device result.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/op_definition.h"
#include "compiler/sbp.h"
#include "core/balanced_split.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel.h"
#include "kernels/kernel_registry.h"

namespace loom::compiler {
namespace {

HostTensor ZeroTensor(const Shape& shape, plan::DataType data_type) {
  HostTensor tensor;
  tensor.data_type = data_type;
  tensor.shape = shape;
  tensor.bytes.assign(shape.NumElements() * DataTypeSize(data_type), std::byte{0});
  return tensor;
}

HostTensor RandomFloats(const Shape& shape, std::mt19937& engine) {
  HostTensor tensor = ZeroTensor(shape, plan::FLOAT32);
  std::uniform_real_distribution<float> distribution(-1.0f, 1.0f);
  float* values = reinterpret_cast<float*>(tensor.bytes.data());
  for (int64_t i = 0; i < shape.NumElements(); ++i) values[i] = distribution(engine);
  return tensor;
}

HostTensor Integers(const Shape& shape, plan::DataType data_type,
                    const std::vector<int64_t>& values) {
  HostTensor tensor = ZeroTensor(shape, data_type);
  for (int64_t i = 0; i < shape.NumElements(); ++i) {
    const int64_t value = values[i % values.size()];
    if (data_type == plan::INT32) {
      reinterpret_cast<int32_t*>(tensor.bytes.data())[i] = static_cast<int32_t>(value);
    } else {
      reinterpret_cast<int64_t*>(tensor.bytes.data())[i] = value;
    }
  }
  return tensor;
}

// Rows and row bytes of `shape` seen as [outer, extent(axis), inner].
struct AxisLayout {
  int64_t outer = 1;
  int64_t inner_bytes = 1;
};

AxisLayout LayoutAround(const Shape& shape, int axis, plan::DataType data_type) {
  AxisLayout layout;
  layout.inner_bytes = DataTypeSize(data_type);
  for (int i = 0; i < axis; ++i) layout.outer *= shape.dimension(i);
  for (int i = axis + 1; i < shape.rank(); ++i) layout.inner_bytes *= shape.dimension(i);
  return layout;
}

HostTensor SliceAlong(const HostTensor& whole, int axis, AxisRange range) {
  Shape shape = whole.shape;
  shape.set_dimension(axis, range.size());
  HostTensor part = ZeroTensor(shape, whole.data_type);
  const AxisLayout layout = LayoutAround(whole.shape, axis, whole.data_type);
  const int64_t whole_row = whole.shape.dimension(axis) * layout.inner_bytes;
  const int64_t part_row = range.size() * layout.inner_bytes;
  for (int64_t row = 0; row < layout.outer && part_row > 0; ++row) {
    std::memcpy(part.bytes.data() + row * part_row,
                whole.bytes.data() + row * whole_row + range.begin * layout.inner_bytes, part_row);
  }
  return part;
}

void PlaceAlong(HostTensor* whole, const HostTensor& part, int axis, int64_t begin) {
  const AxisLayout layout = LayoutAround(whole->shape, axis, whole->data_type);
  const int64_t whole_row = whole->shape.dimension(axis) * layout.inner_bytes;
  const int64_t part_row = part.shape.dimension(axis) * layout.inner_bytes;
  for (int64_t row = 0; row < layout.outer && part_row > 0; ++row) {
    std::memcpy(whole->bytes.data() + row * whole_row + begin * layout.inner_bytes,
                part.bytes.data() + row * part_row, part_row);
  }
}

plan::TensorDesc Describe(const Shape& shape, plan::DataType data_type) {
  plan::TensorDesc desc;
  for (int64_t dimension : shape.dimensions()) desc.add_shape(dimension);
  desc.set_data_type(data_type);
  return desc;
}

std::vector<float> Floats(const HostTensor& tensor) {
  absl::Span<const float> values = tensor.Values<float>();
  return std::vector<float>(values.begin(), values.end());
}

// One op: its definition, attributes and logical inputs.
class EquivalenceCase {
 public:
  EquivalenceCase(const std::string& op_type, std::vector<HostTensor> inputs)
      : op_type_(op_type), inputs_(std::move(inputs)) {
    EXPECT_TRUE(RegisterStandardOps(&registry_).ok());
    EXPECT_TRUE(RegisterCpuKernels(&kernels_).ok());
    definition_ = registry_.Find(op_type);
    context_.op_name = op_type;
    context_.attributes = &attributes_;
    for (const HostTensor& input : inputs_) {
      context_.inputs.push_back(TensorType{input.shape, input.data_type});
    }
  }
  EquivalenceCase(const EquivalenceCase&) = delete;
  EquivalenceCase& operator=(const EquivalenceCase&) = delete;

  EquivalenceCase& Int(const std::string& name, int64_t value) {
    attributes_[name].set_int_value(value);
    return *this;
  }
  EquivalenceCase& Bool(const std::string& name, bool value) {
    attributes_[name].set_bool_value(value);
    return *this;
  }
  EquivalenceCase& IntList(const std::string& name, const std::vector<int64_t>& values) {
    for (int64_t value : values) attributes_[name].mutable_int_list()->add_values(value);
    return *this;
  }

  // Checks every signature at `degree`; returns how many were checked.
  int CheckEverySignature(int64_t degree) {
    absl::StatusOr<std::vector<TensorType>> outputs = definition_->InferTypes(context_);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    if (!outputs.ok()) return 0;
    context_.outputs = *outputs;
    SbpSignature one_device;
    one_device.inputs.assign(inputs_.size(), Sbp::Broadcast());
    one_device.outputs.assign(outputs->size(), Sbp::Broadcast());
    std::vector<HostTensor> expected = RunRanks(one_device, 1)[0];
    int checked = 0;
    for (const SbpSignature& signature : definition_->SbpSignatures(context_, degree)) {
      SCOPED_TRACE(signature.ToString() + " on " + std::to_string(degree) + " devices");
      std::vector<std::vector<HostTensor>> ranks = RunRanks(signature, degree);
      if (ranks.empty()) continue;
      for (size_t output = 0; output < outputs->size(); ++output) {
        CompareOutput(signature.outputs[output], ranks, output, expected[output]);
      }
      ++checked;
    }
    return checked;
  }

 private:
  // The outputs of every rank under `signature` (empty after a failure).
  std::vector<std::vector<HostTensor>> RunRanks(const SbpSignature& signature, int64_t degree) {
    std::mt19937 engine(7);
    // P inputs: random parts, the last rank holding the remainder.
    std::vector<std::vector<HostTensor>> partial_parts(inputs_.size());
    for (size_t input = 0; input < inputs_.size(); ++input) {
      if (!signature.inputs[input].is_partial()) continue;
      HostTensor remainder = inputs_[input];
      float* remaining = reinterpret_cast<float*>(remainder.bytes.data());
      for (int64_t rank = 0; rank + 1 < degree; ++rank) {
        HostTensor part = RandomFloats(remainder.shape, engine);
        const float* values = reinterpret_cast<const float*>(part.bytes.data());
        for (int64_t i = 0; i < remainder.shape.NumElements(); ++i) remaining[i] -= values[i];
        partial_parts[input].push_back(std::move(part));
      }
      partial_parts[input].push_back(std::move(remainder));
    }
    std::vector<std::vector<HostTensor>> results;
    for (int64_t rank = 0; rank < degree; ++rank) {
      LoweringContext lowering;
      lowering.op = &context_;
      lowering.coordinates = {rank};
      lowering.hierarchy = {degree};
      std::vector<HostTensor> local_inputs;
      for (size_t input = 0; input < inputs_.size(); ++input) {
        const Sbp& sbp = signature.inputs[input];
        lowering.input_sbp.push_back(NdSbp{sbp});
        if (sbp.is_split()) {
          const int64_t length = inputs_[input].shape.dimension(sbp.axis);
          local_inputs.push_back(
              SliceAlong(inputs_[input], sbp.axis, BalancedRange(length, degree, rank)));
        } else if (sbp.is_partial()) {
          local_inputs.push_back(partial_parts[input][rank]);
        } else {
          local_inputs.push_back(inputs_[input]);
        }
        lowering.local_inputs.push_back(
            TensorType{local_inputs.back().shape, local_inputs.back().data_type});
      }
      for (size_t output = 0; output < context_.outputs.size(); ++output) {
        const Sbp& sbp = signature.outputs[output];
        lowering.output_sbp.push_back(NdSbp{sbp});
        TensorType local = context_.outputs[output];
        if (sbp.is_split()) {
          local.shape.set_dimension(
              sbp.axis, BalancedRange(local.shape.dimension(sbp.axis), degree, rank).size());
        }
        lowering.local_outputs.push_back(local);
      }
      absl::StatusOr<plan::KernelConf> conf = definition_->Lower(op_type_, lowering);
      EXPECT_TRUE(conf.ok()) << conf.status();
      if (!conf.ok()) return {};
      KernelInit init;
      init.task_name = op_type_ + "_rank" + std::to_string(rank);
      init.conf = &*conf;
      for (const HostTensor& input : local_inputs) {
        init.inputs.push_back(Describe(input.shape, input.data_type));
      }
      std::vector<HostTensor> local_outputs;
      for (const TensorType& output : lowering.local_outputs) {
        init.outputs.push_back(Describe(output.shape, output.data_type));
        local_outputs.push_back(ZeroTensor(output.shape, output.data_type));
      }
      absl::StatusOr<std::unique_ptr<Kernel>> kernel = kernels_.Create(plan::CPU, init);
      EXPECT_TRUE(kernel.ok()) << kernel.status();
      if (!kernel.ok()) return {};
      std::vector<TensorView> input_views;
      for (HostTensor& input : local_inputs) input_views.push_back(input.View());
      std::vector<TensorView> output_views;
      for (HostTensor& output : local_outputs) output_views.push_back(output.View());
      KernelContext kernel_context;
      kernel_context.inputs = input_views;
      kernel_context.outputs = output_views;
      absl::Status status = (*kernel)->Compute(kernel_context);
      EXPECT_TRUE(status.ok()) << status;
      if (!status.ok()) return {};
      results.push_back(std::move(local_outputs));
    }
    return results;
  }

  void CompareOutput(const Sbp& sbp, const std::vector<std::vector<HostTensor>>& ranks,
                     size_t output, const HostTensor& expected) {
    const int64_t degree = static_cast<int64_t>(ranks.size());
    std::vector<HostTensor> candidates;
    if (sbp.is_split()) {
      HostTensor whole = ZeroTensor(expected.shape, expected.data_type);
      for (int64_t rank = 0; rank < degree; ++rank) {
        const AxisRange range = BalancedRange(expected.shape.dimension(sbp.axis), degree, rank);
        PlaceAlong(&whole, ranks[rank][output], sbp.axis, range.begin);
      }
      candidates.push_back(std::move(whole));
    } else if (sbp.is_partial()) {
      HostTensor sum = ZeroTensor(expected.shape, expected.data_type);
      float* total = reinterpret_cast<float*>(sum.bytes.data());
      for (int64_t rank = 0; rank < degree; ++rank) {
        ASSERT_EQ(ranks[rank][output].shape, expected.shape);
        const float* values = reinterpret_cast<const float*>(ranks[rank][output].bytes.data());
        for (int64_t i = 0; i < expected.shape.NumElements(); ++i) total[i] += values[i];
      }
      candidates.push_back(std::move(sum));
    } else {
      for (int64_t rank = 0; rank < degree; ++rank) candidates.push_back(ranks[rank][output]);
    }
    for (const HostTensor& candidate : candidates) {
      ASSERT_EQ(candidate.shape, expected.shape);
      if (expected.data_type != plan::FLOAT32) {  // indices: exactly equal
        EXPECT_EQ(candidate.bytes, expected.bytes);
        continue;
      }
      const std::vector<float> actual = Floats(candidate);
      const std::vector<float> reference = Floats(expected);
      for (size_t i = 0; i < reference.size(); ++i) {
        ASSERT_NEAR(actual[i], reference[i], 1e-4f * (1.0f + std::fabs(reference[i])))
            << "element " << i;
      }
    }
  }

  std::string op_type_;
  OpRegistry registry_;
  KernelRegistry kernels_;
  const OpDefinition* definition_ = nullptr;
  std::vector<HostTensor> inputs_;
  AttributeMap attributes_;
  OpContext context_;
};

class OpsEquivalenceTest : public ::testing::TestWithParam<int64_t> {
 protected:
  int64_t degree() const { return GetParam(); }
  std::mt19937 engine_{1234};
};

TEST_P(OpsEquivalenceTest, BiasAdd) {
  EquivalenceCase op("bias_add", {RandomFloats({5, 4, 6}, engine_), RandomFloats({6}, engine_)});
  EXPECT_GE(op.CheckEverySignature(degree()), 4);
}

TEST_P(OpsEquivalenceTest, SoftmaxAndLogSoftmax) {
  for (const char* op_type : {"softmax", "log_softmax"}) {
    SCOPED_TRACE(op_type);
    EquivalenceCase op(op_type, {RandomFloats({5, 3, 7}, engine_)});
    EXPECT_GE(op.CheckEverySignature(degree()), 3);
  }
}

TEST_P(OpsEquivalenceTest, LayerNorm) {
  EquivalenceCase op("layer_norm", {RandomFloats({5, 3, 8}, engine_), RandomFloats({8}, engine_),
                                    RandomFloats({8}, engine_)});
  EXPECT_GE(op.CheckEverySignature(degree()), 3);
}

TEST_P(OpsEquivalenceTest, Embedding) {
  EquivalenceCase op("embedding", {RandomFloats({7, 6}, engine_),
                                   Integers({4, 3}, plan::INT64, {0, 6, 3, 4, 1, 5, 2, 6, 0})});
  EXPECT_EQ(op.CheckEverySignature(degree()), 5);
  EquivalenceCase int32_ids(
      "embedding", {RandomFloats({7, 3}, engine_), Integers({5}, plan::INT32, {3, 6, 0, 4, 2})});
  EXPECT_EQ(int32_ids.CheckEverySignature(degree()), 4);
}

TEST_P(OpsEquivalenceTest, Reshape) {
  // [B, T, D] -> [B, T, H, Dh] with H = 6: splits of D by 2 and 3 keep heads whole.
  EquivalenceCase heads("reshape", {RandomFloats({3, 4, 12}, engine_)});
  heads.IntList("shape", {3, 4, 6, 2});
  EXPECT_GE(heads.CheckEverySignature(degree()), 3);
  // Three heads of 2: D = 6 divides by 2 but the heads do not, so S(2) -> S(2) is not offered
  // on 2 devices (it would cut a head in half).
  EquivalenceCase odd_heads("reshape", {RandomFloats({2, 4, 6}, engine_)});
  odd_heads.IntList("shape", {2, 4, 3, 2});
  EXPECT_EQ(odd_heads.CheckEverySignature(degree()), degree() == 2 ? 4 : 3);
  EquivalenceCase flatten("reshape", {RandomFloats({6, 4, 3, 2}, engine_)});
  flatten.IntList("shape", {24, -1});
  EXPECT_GE(flatten.CheckEverySignature(degree()), 3);
}

TEST_P(OpsEquivalenceTest, Transpose) {
  EquivalenceCase op("transpose", {RandomFloats({3, 4, 5, 2}, engine_)});
  op.IntList("permutation", {2, 0, 3, 1});
  // Axis 3 (extent 2) splits only 2 ways.
  EXPECT_EQ(op.CheckEverySignature(degree()), degree() == 2 ? 6 : 5);
}

TEST_P(OpsEquivalenceTest, Slice) {
  EquivalenceCase op("slice", {RandomFloats({5, 7, 4}, engine_)});
  op.IntList("begin", {0, 2, 1}).IntList("end", {5, 6, 3});
  EXPECT_EQ(op.CheckEverySignature(degree()), 3);
}

TEST_P(OpsEquivalenceTest, Concat) {
  EquivalenceCase op("concat", {RandomFloats({5, 2, 3}, engine_), RandomFloats({5, 4, 3}, engine_),
                                RandomFloats({5, 1, 3}, engine_)});
  op.Int("axis", 1);
  EXPECT_EQ(op.CheckEverySignature(degree()), 4);
}

TEST_P(OpsEquivalenceTest, Reductions) {
  for (const char* op_type : {"reduce_sum", "reduce_mean"}) {
    for (bool keep_dims : {false, true}) {
      SCOPED_TRACE(std::string(op_type) + (keep_dims ? " keep_dims" : ""));
      EquivalenceCase op(op_type, {RandomFloats({5, 4, 7}, engine_)});
      op.IntList("axes", {-1, 0}).Bool("keep_dims", keep_dims);
      EXPECT_EQ(op.CheckEverySignature(degree()), 5);
    }
  }
}

TEST_P(OpsEquivalenceTest, SparseCrossEntropy) {
  EquivalenceCase op(
      "sparse_cross_entropy",
      {RandomFloats({4, 3, 10}, engine_), Integers({4, 3}, plan::INT32, {1, 9, 0, -100, 4, 7, 2})});
  EXPECT_EQ(op.CheckEverySignature(degree()), 3);
}

TEST_P(OpsEquivalenceTest, CausalAttention) {
  const Shape shape({3, 4, 5, 8});
  EquivalenceCase op(
      "causal_attention",
      {RandomFloats(shape, engine_), RandomFloats(shape, engine_), RandomFloats(shape, engine_)});
  EXPECT_EQ(op.CheckEverySignature(degree()), 3);
}

TEST_P(OpsEquivalenceTest, MixtureOfExperts) {
  // 6 groups of 5 tokens, 4 experts of 3 slots; slots name tokens or -1 (empty).
  const std::vector<int64_t> slots = {0, 4, -1, 2, 2, 1, -1, 3, 0, 4, 1, -1, 3};
  EquivalenceCase route("moe_route", {RandomFloats({6, 5, 4}, engine_)});
  route.Int("k", 2).Int("capacity_factor", 1);
  EXPECT_EQ(route.CheckEverySignature(degree()), 2);
  EquivalenceCase dispatch(
      "moe_dispatch", {RandomFloats({6, 5, 6}, engine_), Integers({6, 4, 3}, plan::INT32, slots)});
  EXPECT_EQ(dispatch.CheckEverySignature(degree()), 4);
  EquivalenceCase combine(
      "moe_combine", {RandomFloats({6, 4, 3, 6}, engine_), Integers({6, 4, 3}, plan::INT32, slots),
                      RandomFloats({6, 4, 3}, engine_)});
  combine.Int("tokens", 5);
  EXPECT_EQ(combine.CheckEverySignature(degree()), 4);
  EquivalenceCase dispatch_grad("moe_dispatch_grad", {RandomFloats({6, 4, 3, 6}, engine_),
                                                      Integers({6, 4, 3}, plan::INT32, slots)});
  dispatch_grad.Int("tokens", 5);
  EXPECT_EQ(dispatch_grad.CheckEverySignature(degree()), 4);
  EquivalenceCase route_grad(
      "moe_route_grad", {RandomFloats({6, 5, 4}, engine_), Integers({6, 4, 3}, plan::INT32, slots),
                         RandomFloats({6, 4, 3}, engine_)});
  route_grad.Int("k", 2);
  EXPECT_EQ(route_grad.CheckEverySignature(degree()), 3);
}

INSTANTIATE_TEST_SUITE_P(Degrees, OpsEquivalenceTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return std::to_string(info.param) + "Devices";
                         });

}  // namespace
}  // namespace loom::compiler
