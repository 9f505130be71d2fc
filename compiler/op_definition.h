#ifndef LOOM_COMPILER_OP_DEFINITION_H_
#define LOOM_COMPILER_OP_DEFINITION_H_

// The compiler's interface to op types: OpDefinition (type inference, SBP signatures, a cost hint,
// lowering to a kernel conf, and the gradient) and what a definition sees of an op (OpContext,
// LoweringContext, GradientRequest and the GradientBuilder it emits into). OpRegistry is the
// table of definitions by op type that RegisterStandardOps fills from compiler/ops/. Also
// TensorType, OpAttributes (typed reads of an op's attributes) and small checks for definitions.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "compiler/sbp.h"
#include "core/tensor.h"
#include "google/protobuf/map.h"
#include "proto/plan.pb.h"

namespace loom::compiler {

struct TensorType {
  Shape shape;
  plan::DataType data_type = plan::FLOAT32;

  std::string ToString() const;
  bool operator==(const TensorType& other) const {
    return shape == other.shape && data_type == other.data_type;
  }
};

using AttributeMap = google::protobuf::Map<std::string, plan::AttributeValue>;

// Typed reads of an op's attributes; errors name the attribute (the compiler adds the op).
class OpAttributes {
 public:
  explicit OpAttributes(const AttributeMap& attributes) : attributes_(attributes) {}
  bool Has(const std::string& name) const { return attributes_.contains(name); }
  absl::StatusOr<int64_t> GetInt(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t default_value) const;
  absl::StatusOr<double> GetFloat(const std::string& name, double default_value) const;
  absl::StatusOr<bool> GetBool(const std::string& name, bool default_value) const;
  absl::StatusOr<std::vector<int64_t>> GetIntList(const std::string& name) const;
  absl::StatusOr<std::string> GetString(const std::string& name) const;
  const AttributeMap& map() const { return attributes_; }

 private:
  const AttributeMap& attributes_;
};

// What an op definition sees of one logical op.
struct OpContext {
  std::string op_name;
  std::vector<TensorType> inputs;
  // Filled after type inference.
  std::vector<TensorType> outputs;
  const AttributeMap* attributes = nullptr;

  OpAttributes attributes_reader() const { return OpAttributes(*attributes); }
};

// One way to run an op on one placement axis: the SBP of every input and output.
struct SbpSignature {
  std::vector<Sbp> inputs;
  std::vector<Sbp> outputs;
  std::string ToString() const;
};

// What lowering knows of one rank's part of an op.
struct LoweringContext {
  const OpContext* op = nullptr;
  // The chosen SBP of every input and output on every hierarchy axis.
  std::vector<NdSbp> input_sbp;
  std::vector<NdSbp> output_sbp;
  // This rank's slices.
  std::vector<TensorType> local_inputs;
  std::vector<TensorType> local_outputs;
  // This rank's coordinates in the placement's hierarchy, and the hierarchy.
  std::vector<int64_t> coordinates;
  std::vector<int64_t> hierarchy;
};

// Emits ops into a job while its gradient is being built (compiler/autodiff.h).
class GradientBuilder {
 public:
  virtual ~GradientBuilder() = default;
  // Emits an op of `op_type` reading `inputs` and returns the names of its `num_outputs` outputs.
  virtual std::vector<std::string> Emit(const std::string& op_type, std::vector<std::string> inputs,
                                        AttributeMap attributes, int num_outputs = 1) = 0;
};

// What a gradient function sees of one forward op.
struct GradientRequest {
  const OpContext* op = nullptr;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  // The gradient of each output; "" = none (the loss does not depend on it).
  std::vector<std::string> output_gradients;
  std::vector<bool> needs_input_gradient;
};

// The compiler's view of an op type: shape and data type inference on logical shapes, the SBP
// signatures it can run with, a cost hint, and how a rank's slice is computed by a kernel.
class OpDefinition {
 public:
  virtual ~OpDefinition() = default;

  // Checks the inputs and attributes and returns the logical output types. Errors say what is
  // wrong ("inner dimensions differ: a is [2, 3], b is [4, 5]"); the compiler adds the op's name.
  virtual absl::StatusOr<std::vector<TensorType>> InferTypes(const OpContext& context) const = 0;

  // The valid signatures on one placement axis of `parallel_degree` devices, the preferred first
  // (ties in boxing cost go to the earlier one). `context.outputs` is filled.
  virtual std::vector<SbpSignature> SbpSignatures(const OpContext& context,
                                                  int64_t parallel_degree) const = 0;

  // Inputs from this position on only order the op's acts (their bytes are not read, as
  // identity_after's): SBP inference takes each with the SBP it has, never boxing it, and
  // signatures list only the inputs before it. The default: none (the number of inputs).
  virtual int OrderingInputsFrom(const OpContext& context) const {
    return static_cast<int>(context.inputs.size());
  }

  // Floating point operations of the logical op: a cost hint.
  virtual double Flops(const OpContext& context) const { return 0.0; }

  // The kernel configuration that computes this rank's slice. The default runs the kernel of the
  // same op type with the op's attributes.
  virtual absl::StatusOr<plan::KernelConf> Lower(const std::string& op_type,
                                                 const LoweringContext& context) const;

  // Emits the ops computing the gradient of every input that needs one and returns one name per
  // input ("" when not needed or not differentiable, e.g. integer ids and labels). The default:
  // UNIMPLEMENTED "op type has no gradient".
  virtual absl::StatusOr<std::vector<std::string>> Gradient(const GradientRequest& request,
                                                            GradientBuilder* builder) const;
};

// Op definitions by op type: an explicit table (see RegisterStandardOps).
class OpRegistry {
 public:
  absl::Status Register(const std::string& op_type, std::unique_ptr<OpDefinition> definition);
  // nullptr when unknown.
  const OpDefinition* Find(const std::string& op_type) const;
  std::vector<std::string> OpTypes() const;

 private:
  absl::flat_hash_map<std::string, std::unique_ptr<OpDefinition>> definitions_;
};

// Every op of the compiler (compiler/ops/).
absl::Status RegisterStandardOps(OpRegistry* registry);

// Helpers for op definitions.
// An error for the compiler to prefix with the op: InvalidArgument(message).
absl::Status OpError(const std::string& message);
// Checks the number of inputs (max_inputs < 0: no upper bound).
absl::Status CheckInputCount(const OpContext& context, int min_inputs, int max_inputs);
// Normalises a possibly negative axis against a rank; error if out of range.
absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, const std::string& what);

}  // namespace loom::compiler

#endif  // LOOM_COMPILER_OP_DEFINITION_H_
