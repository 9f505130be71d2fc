#ifndef LOOM_CLIENT_JOB_BUILDER_H_
#define LOOM_CLIENT_JOB_BUILDER_H_

// JobBuilder: jobs built in C++ rather than written as .pbtxt files, the same job::Job proto. It
// adds placements, variables, inputs, ops (matmul, add, bias_add, relu, gelu and any other by
// type) and fetches; free functions make attribute values, initializers and input sources.
// loom-gpt's model and some benchmarks build their jobs with it.

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "proto/job.pb.h"

namespace loom {

// Options of one op beyond its inputs and attributes (JobBuilder::OpOptions). Outside the class
// because a nested struct with member initializers cannot be a default argument of its own
// class's members.
struct JobOpOptions {
  std::vector<std::string> placement;  // empty: the job's (or the stage's)
  std::vector<int64_t> hierarchy;
  // One hint per output (an empty hint leaves that output free).
  std::vector<std::vector<std::string>> output_sbp;
  std::optional<int> stage;
  // Op.keep_float32: mixed precision leaves this matmul in float32.
  bool keep_float32 = false;
  // Op.block: the recomputation unit (empty: none).
  std::string block = {};
};

// Builds jobs in C++: the same proto that hand-written .pbtxt jobs parse into.
//
//   JobBuilder builder("mlp");
//   builder.SetPlacement({"cpu:0", "cpu:1"});
//   std::string x = builder.Input("x", {8, 16}, RandomNormal(1.0, /*seed=*/1), {"S(0)"});
//   std::string w = builder.Variable("w", {16, 4}, NormalInit(0.02, /*seed=*/2));
//   std::string y = builder.Matmul("y", x, w);
//   builder.Fetch(y);
//   job::Job job = builder.Build();
class JobBuilder {
 public:
  using Attributes = std::map<std::string, plan::AttributeValue>;
  using OpOptions = JobOpOptions;

  explicit JobBuilder(std::string name);

  JobBuilder& SetPlacement(std::vector<std::string> devices, std::vector<int64_t> hierarchy = {});
  JobBuilder& AddStagePlacement(std::vector<std::string> devices,
                                std::vector<int64_t> hierarchy = {});
  JobBuilder& SetSteps(int64_t steps);
  JobBuilder& SetRegisterSlots(int32_t slots);
  JobBuilder& SetDeviceMemoryBudget(int64_t bytes);

  // Returns the tensor's name.
  std::string Variable(const std::string& name, std::vector<int64_t> shape,
                       const job::Initializer& initializer, std::vector<std::string> sbp = {},
                       std::vector<std::string> placement = {});
  std::string Input(const std::string& name, std::vector<int64_t> shape, const job::Input& source,
                    std::vector<std::string> sbp = {}, std::vector<std::string> placement = {});

  // A general op; `outputs` defaults to one output named like the op. Returns the first output.
  std::string Op(const std::string& type, const std::string& name, std::vector<std::string> inputs,
                 Attributes attributes = {}, OpOptions options = {},
                 std::vector<std::string> outputs = {});

  // Common ops.
  std::string Matmul(const std::string& name, const std::string& a, const std::string& b,
                     bool transpose_a = false, bool transpose_b = false, OpOptions options = {});
  std::string Add(const std::string& name, const std::string& a, const std::string& b,
                  OpOptions options = {});
  std::string BiasAdd(const std::string& name, const std::string& x, const std::string& bias,
                      OpOptions options = {});
  std::string Relu(const std::string& name, const std::string& x, OpOptions options = {});
  std::string Gelu(const std::string& name, const std::string& x, OpOptions options = {});

  JobBuilder& Fetch(const std::string& tensor);
  // A fetched scalar that a training step reports as the sum over its micro-batches (a count),
  // not their mean (Job.summed_fetches).
  JobBuilder& SumOverStep(const std::string& fetched);

  const job::Job& job() const { return job_; }
  job::Job Build() const { return job_; }

 private:
  job::Job job_;
};

// Attribute values.
plan::AttributeValue IntAttribute(int64_t value);
plan::AttributeValue FloatAttribute(double value);
plan::AttributeValue BoolAttribute(bool value);
plan::AttributeValue IntListAttribute(std::vector<int64_t> values);

// Initializers and input sources.
job::Initializer ConstantInit(double value);
job::Initializer NormalInit(double std, int64_t seed, double mean = 0.0);
job::Initializer UniformInit(double low, double high, int64_t seed);
job::Input RandomNormal(double std, int64_t seed, double mean = 0.0);
job::Input RandomIntegers(int64_t below, int64_t seed, plan::DataType type = plan::INT32);

}  // namespace loom

#endif  // LOOM_CLIENT_JOB_BUILDER_H_
