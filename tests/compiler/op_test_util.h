#ifndef LOOM_TESTS_COMPILER_OP_TEST_UTIL_H_
#define LOOM_TESTS_COMPILER_OP_TEST_UTIL_H_

// Helpers of the op definition tests (ops_test.cc, moe_ops_test.cc, shape_ops_test.cc,
// gradient_ops_test.cc): TestOp, one op of the standard registry with its inputs and attributes,
// whose type inference, SBP signatures, cost hints and lowering a test checks; tensor types by
// data type; the attributes of a lowered kernel; one-axis SBPs. Header-only: those tests link
// only loom_compiler.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/op_definition.h"
#include "compiler/sbp.h"
#include "gtest/gtest.h"
#include "proto/plan.pb.h"

namespace loom::compiler::testing {

inline TensorType Float32(const Shape& shape) { return TensorType{shape, plan::FLOAT32}; }
inline TensorType Bfloat16(const Shape& shape) { return TensorType{shape, plan::BFLOAT16}; }
inline TensorType Int32(const Shape& shape) { return TensorType{shape, plan::INT32}; }
inline TensorType Int64(const Shape& shape) { return TensorType{shape, plan::INT64}; }

// One op under test: its definition from the standard registry, its inputs and attributes.
class TestOp {
 public:
  TestOp(const std::string& op_type, std::vector<TensorType> inputs) : op_type_(op_type) {
    absl::Status status = RegisterStandardOps(&registry_);
    EXPECT_TRUE(status.ok()) << status;
    definition_ = registry_.Find(op_type);
    EXPECT_NE(definition_, nullptr) << op_type;
    context_.op_name = "op";
    context_.inputs = std::move(inputs);
    context_.attributes = &attributes_;
  }
  TestOp(const TestOp&) = delete;
  TestOp& operator=(const TestOp&) = delete;

  TestOp& Int(const std::string& name, int64_t value) {
    attributes_[name].set_int_value(value);
    return *this;
  }
  TestOp& Float(const std::string& name, double value) {
    attributes_[name].set_float_value(value);
    return *this;
  }
  TestOp& String(const std::string& name, const std::string& value) {
    attributes_[name].set_string_value(value);
    return *this;
  }
  TestOp& Bool(const std::string& name, bool value) {
    attributes_[name].set_bool_value(value);
    return *this;
  }
  TestOp& IntList(const std::string& name, const std::vector<int64_t>& values) {
    plan::AttributeValue& attribute = attributes_[name];
    attribute.mutable_int_list()->clear_values();
    for (int64_t value : values) attribute.mutable_int_list()->add_values(value);
    return *this;
  }

  // Type inference; on success the outputs are recorded for the other calls.
  absl::StatusOr<std::vector<TensorType>> Infer() {
    absl::StatusOr<std::vector<TensorType>> outputs = definition_->InferTypes(context_);
    if (outputs.ok()) context_.outputs = *outputs;
    return outputs;
  }

  // The single output's type; fails the test when inference fails.
  TensorType Output() {
    absl::StatusOr<std::vector<TensorType>> outputs = Infer();
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    if (!outputs.ok() || outputs->size() != 1) return TensorType{};
    return (*outputs)[0];
  }

  // The message of a failed inference ("" when it succeeds).
  std::string Error() {
    absl::StatusOr<std::vector<TensorType>> outputs = Infer();
    if (outputs.ok()) return "";
    EXPECT_EQ(outputs.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(outputs.status().message());
  }

  // The signatures as "(S(0), B) -> (S(0))" strings, after a successful inference.
  std::vector<std::string> Signatures(int64_t degree) {
    Output();
    std::vector<std::string> texts;
    for (const SbpSignature& signature : definition_->SbpSignatures(context_, degree)) {
      EXPECT_EQ(signature.inputs.size(), context_.inputs.size()) << signature.ToString();
      EXPECT_EQ(signature.outputs.size(), context_.outputs.size()) << signature.ToString();
      texts.push_back(signature.ToString());
    }
    return texts;
  }

  double Flops() {
    Output();
    return definition_->Flops(context_);
  }

  // Lowers one rank: `input_sbp` per input (one Sbp per hierarchy axis), the local input types,
  // the rank's coordinates and the hierarchy.
  absl::StatusOr<plan::KernelConf> Lower(std::vector<NdSbp> input_sbp,
                                         std::vector<TensorType> local_inputs,
                                         std::vector<int64_t> coordinates,
                                         std::vector<int64_t> hierarchy) {
    Output();
    LoweringContext lowering;
    lowering.op = &context_;
    lowering.input_sbp = std::move(input_sbp);
    lowering.local_inputs = std::move(local_inputs);
    lowering.coordinates = std::move(coordinates);
    lowering.hierarchy = std::move(hierarchy);
    return definition_->Lower(op_type_, lowering);
  }

  const OpDefinition* definition() const { return definition_; }
  const OpContext& context() const { return context_; }

  // Lowering on one device with everything broadcast.
  absl::StatusOr<plan::KernelConf> LowerOnOneDevice() {
    return Lower(std::vector<NdSbp>(context_.inputs.size(), NdSbp{Sbp::Broadcast()}),
                 context_.inputs, {0}, {1});
  }

 private:
  std::string op_type_;
  OpRegistry registry_;
  const OpDefinition* definition_ = nullptr;
  AttributeMap attributes_;
  OpContext context_;
};

inline std::vector<std::string> AttributeNames(const plan::KernelConf& conf) {
  std::vector<std::string> names;
  for (const auto& [name, value] : conf.attributes()) names.push_back(name);
  return names;
}

inline std::vector<int64_t> IntListOf(const plan::KernelConf& conf, const std::string& name) {
  const auto& values = conf.attributes().at(name).int_list().values();
  return std::vector<int64_t>(values.begin(), values.end());
}

inline NdSbp Split(int axis) { return NdSbp{Sbp::Split(axis)}; }
inline NdSbp Broadcast() { return NdSbp{Sbp::Broadcast()}; }

}  // namespace loom::compiler::testing

#endif  // LOOM_TESTS_COMPILER_OP_TEST_UTIL_H_
