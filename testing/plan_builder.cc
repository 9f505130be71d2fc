#include "testing/plan_builder.h"

namespace loom {

PlanBuilder::PlanBuilder(const std::string& job_name) { plan_.set_job_name(job_name); }

PlanBuilder& PlanBuilder::AddCpuDevices(int count, int64_t memory_budget_bytes) {
  for (int i = 0; i < count; ++i) {
    plan::DeviceDesc* desc = plan_.add_devices();
    desc->mutable_device()->set_type(plan::CPU);
    desc->mutable_device()->set_index(i);
    desc->set_memory_budget_bytes(memory_budget_bytes);
  }
  return *this;
}

PlanBuilder& PlanBuilder::AddRegister(const std::string& name, std::initializer_list<int64_t> shape,
                                      plan::DataType data_type, int num_slots) {
  return AddRegister(name, std::vector<int64_t>(shape), data_type, num_slots);
}

PlanBuilder& PlanBuilder::AddRegister(const std::string& name, const std::vector<int64_t>& shape,
                                      plan::DataType data_type, int num_slots) {
  plan::RegisterDesc* reg = plan_.add_registers();
  reg->set_name(name);
  for (int64_t dimension : shape) reg->mutable_tensor()->add_shape(dimension);
  reg->mutable_tensor()->set_data_type(data_type);
  reg->set_num_slots(num_slots);
  return *this;
}

plan::Task& PlanBuilder::AddTask(const std::string& name, plan::TaskKind kind, int device,
                                 std::vector<std::string> inputs, std::vector<std::string> outputs,
                                 const std::string& op_type) {
  plan::Task* task = plan_.add_tasks();
  task->set_name(name);
  task->set_kind(kind);
  task->mutable_stream()->mutable_device()->set_type(plan::CPU);
  task->mutable_stream()->mutable_device()->set_index(device);
  task->mutable_stream()->set_kind(plan::STREAM_COMPUTE);
  for (std::string& input : inputs) task->add_inputs(std::move(input));
  for (std::string& output : outputs) task->add_outputs(std::move(output));
  if (!op_type.empty()) task->mutable_kernel()->set_op_type(op_type);
  return *task;
}

void PlanBuilder::SetAttribute(plan::Task& task, const std::string& name, int64_t value) {
  (*task.mutable_kernel()->mutable_attributes())[name].set_int_value(value);
}

void PlanBuilder::SetFloatAttribute(plan::Task& task, const std::string& name, double value) {
  (*task.mutable_kernel()->mutable_attributes())[name].set_float_value(value);
}

void PlanBuilder::SetBoolAttribute(plan::Task& task, const std::string& name, bool value) {
  (*task.mutable_kernel()->mutable_attributes())[name].set_bool_value(value);
}

void PlanBuilder::SetStringAttribute(plan::Task& task, const std::string& name,
                                     const std::string& value) {
  (*task.mutable_kernel()->mutable_attributes())[name].set_string_value(value);
}

}  // namespace loom
