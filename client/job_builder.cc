#include "client/job_builder.h"

namespace loom {
namespace {

void FillPlacement(job::Placement* placement, const std::vector<std::string>& devices,
                   const std::vector<int64_t>& hierarchy) {
  for (const std::string& device : devices) placement->add_devices(device);
  for (int64_t extent : hierarchy) placement->add_hierarchy(extent);
}

}  // namespace

JobBuilder::JobBuilder(std::string name) { job_.set_name(std::move(name)); }

JobBuilder& JobBuilder::SetPlacement(std::vector<std::string> devices,
                                     std::vector<int64_t> hierarchy) {
  job_.clear_placement();
  FillPlacement(job_.mutable_placement(), devices, hierarchy);
  return *this;
}

JobBuilder& JobBuilder::AddStagePlacement(std::vector<std::string> devices,
                                          std::vector<int64_t> hierarchy) {
  FillPlacement(job_.add_stage_placements(), devices, hierarchy);
  return *this;
}

JobBuilder& JobBuilder::SetSteps(int64_t steps) {
  job_.set_num_steps(steps);
  return *this;
}

JobBuilder& JobBuilder::SetRegisterSlots(int32_t slots) {
  job_.set_register_slots(slots);
  return *this;
}

JobBuilder& JobBuilder::SetDeviceMemoryBudget(int64_t bytes) {
  job_.set_device_memory_budget_bytes(bytes);
  return *this;
}

std::string JobBuilder::Variable(const std::string& name, std::vector<int64_t> shape,
                                 const job::Initializer& initializer, std::vector<std::string> sbp,
                                 std::vector<std::string> placement) {
  job::Variable* variable = job_.add_variables();
  variable->set_name(name);
  for (int64_t extent : shape) variable->add_shape(extent);
  *variable->mutable_initializer() = initializer;
  for (std::string& entry : sbp) variable->add_sbp(std::move(entry));
  FillPlacement(variable->mutable_placement(), placement, {});
  return name;
}

std::string JobBuilder::Input(const std::string& name, std::vector<int64_t> shape,
                              const job::Input& source, std::vector<std::string> sbp,
                              std::vector<std::string> placement) {
  job::Input* input = job_.add_inputs();
  *input = source;
  input->set_name(name);
  for (int64_t extent : shape) input->add_shape(extent);
  for (std::string& entry : sbp) input->add_sbp(std::move(entry));
  FillPlacement(input->mutable_placement(), placement, {});
  return name;
}

std::string JobBuilder::Op(const std::string& type, const std::string& name,
                           std::vector<std::string> inputs, Attributes attributes,
                           OpOptions options, std::vector<std::string> outputs) {
  job::Op* op = job_.add_ops();
  op->set_name(name);
  op->set_type(type);
  for (std::string& input : inputs) op->add_inputs(std::move(input));
  if (outputs.empty()) outputs.push_back(name);
  for (const std::string& output : outputs) op->add_outputs(output);
  for (auto& [key, value] : attributes) (*op->mutable_attributes())[key] = value;
  FillPlacement(op->mutable_placement(), options.placement, options.hierarchy);
  for (const std::vector<std::string>& hint : options.output_sbp) {
    job::SbpHint* entry = op->add_output_sbp();
    for (const std::string& sbp : hint) entry->add_sbp(sbp);
  }
  if (options.stage.has_value()) op->set_stage(*options.stage);
  if (options.keep_float32) op->set_keep_float32(true);
  if (!options.block.empty()) op->set_block(options.block);
  return outputs.front();
}

std::string JobBuilder::Matmul(const std::string& name, const std::string& a, const std::string& b,
                               bool transpose_a, bool transpose_b, OpOptions options) {
  Attributes attributes;
  if (transpose_a) attributes["transpose_a"] = BoolAttribute(true);
  if (transpose_b) attributes["transpose_b"] = BoolAttribute(true);
  return Op("matmul", name, {a, b}, std::move(attributes), std::move(options));
}

std::string JobBuilder::Add(const std::string& name, const std::string& a, const std::string& b,
                            OpOptions options) {
  return Op("add", name, {a, b}, {}, std::move(options));
}

std::string JobBuilder::BiasAdd(const std::string& name, const std::string& x,
                                const std::string& bias, OpOptions options) {
  return Op("bias_add", name, {x, bias}, {}, std::move(options));
}

std::string JobBuilder::Relu(const std::string& name, const std::string& x, OpOptions options) {
  return Op("relu", name, {x}, {}, std::move(options));
}

std::string JobBuilder::Gelu(const std::string& name, const std::string& x, OpOptions options) {
  return Op("gelu", name, {x}, {}, std::move(options));
}

JobBuilder& JobBuilder::Fetch(const std::string& tensor) {
  job_.add_fetch(tensor);
  return *this;
}

JobBuilder& JobBuilder::SumOverStep(const std::string& fetched) {
  job_.add_summed_fetches(fetched);
  return *this;
}

plan::AttributeValue IntAttribute(int64_t value) {
  plan::AttributeValue attribute;
  attribute.set_int_value(value);
  return attribute;
}

plan::AttributeValue FloatAttribute(double value) {
  plan::AttributeValue attribute;
  attribute.set_float_value(value);
  return attribute;
}

plan::AttributeValue BoolAttribute(bool value) {
  plan::AttributeValue attribute;
  attribute.set_bool_value(value);
  return attribute;
}

plan::AttributeValue IntListAttribute(std::vector<int64_t> values) {
  plan::AttributeValue attribute;
  // Set the list even when it is empty, so that the attribute holds a list.
  auto* list = attribute.mutable_int_list();
  for (int64_t value : values) list->add_values(value);
  return attribute;
}

job::Initializer ConstantInit(double value) {
  job::Initializer initializer;
  initializer.set_constant(value);
  return initializer;
}

job::Initializer NormalInit(double std, int64_t seed, double mean) {
  job::Initializer initializer;
  initializer.mutable_normal()->set_std(std);
  initializer.mutable_normal()->set_mean(mean);
  initializer.mutable_normal()->set_seed(seed);
  return initializer;
}

job::Initializer UniformInit(double low, double high, int64_t seed) {
  job::Initializer initializer;
  initializer.mutable_uniform()->set_low(low);
  initializer.mutable_uniform()->set_high(high);
  initializer.mutable_uniform()->set_seed(seed);
  return initializer;
}

job::Input RandomNormal(double std, int64_t seed, double mean) {
  job::Input input;
  input.mutable_random_normal()->set_std(std);
  input.mutable_random_normal()->set_mean(mean);
  input.mutable_random_normal()->set_seed(seed);
  return input;
}

job::Input RandomIntegers(int64_t below, int64_t seed, plan::DataType type) {
  job::Input input;
  input.set_random_integers_below(below);
  input.set_seed(seed);
  input.set_data_type(type);
  return input;
}

}  // namespace loom
