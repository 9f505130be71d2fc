#include "tests/kernels/kernel_test_util.h"

#include <cstring>
#include <random>
#include <utility>

#include "core/data_type.h"
#include "kernels/cpu/cast_kernel.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_registry.h"

namespace loom::kernel_test {
namespace {

plan::TensorDesc Describe(const HostTensor& tensor) {
  plan::TensorDesc desc;
  for (int64_t dimension : tensor.shape.dimensions()) desc.add_shape(dimension);
  desc.set_data_type(tensor.data_type);
  return desc;
}

std::vector<TensorView> Views(std::vector<HostTensor>& tensors) {
  std::vector<TensorView> views;
  for (HostTensor& tensor : tensors) views.push_back(tensor.View());
  return views;
}

}  // namespace

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

plan::AttributeValue StringAttribute(const std::string& value) {
  plan::AttributeValue attribute;
  attribute.set_string_value(value);
  return attribute;
}

plan::AttributeValue IntListAttribute(const std::vector<int64_t>& values) {
  plan::AttributeValue attribute;
  for (int64_t value : values) attribute.mutable_int_list()->add_values(value);
  // An empty list is still a list.
  attribute.mutable_int_list();
  return attribute;
}

HostTensor MakeTensor(const Shape& shape, plan::DataType data_type) {
  HostTensor tensor;
  tensor.data_type = data_type;
  tensor.shape = shape;
  tensor.bytes.resize(shape.NumElements() * DataTypeSize(data_type));
  return tensor;
}

HostTensor FloatTensor(const Shape& shape, const std::vector<float>& values) {
  HostTensor tensor = MakeTensor(shape, plan::FLOAT32);
  if (!tensor.bytes.empty()) std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

HostTensor Int32Tensor(const Shape& shape, const std::vector<int32_t>& values) {
  HostTensor tensor = MakeTensor(shape, plan::INT32);
  if (!tensor.bytes.empty()) std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

HostTensor Int64Tensor(const Shape& shape, const std::vector<int64_t>& values) {
  HostTensor tensor = MakeTensor(shape, plan::INT64);
  if (!tensor.bytes.empty()) std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

std::vector<float> RandomFloats(int64_t count, uint32_t seed, float low, float high) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  std::vector<float> values(count);
  for (float& value : values) value = distribution(engine);
  return values;
}

std::vector<float> FloatValues(const HostTensor& tensor) {
  absl::Span<const float> values = tensor.Values<float>();
  return std::vector<float>(values.begin(), values.end());
}

HostTensor Bfloat16Tensor(const Shape& shape, const std::vector<float>& values,
                          std::vector<float>* rounded) {
  HostTensor tensor = MakeTensor(shape, plan::BFLOAT16);
  rounded->resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t bits = cpu::Float32ToBfloat16(values[i]);
    std::memcpy(tensor.bytes.data() + 2 * i, &bits, 2);
    (*rounded)[i] = cpu::Bfloat16ToFloat32(bits);
  }
  return tensor;
}

std::vector<float> WidenedValues(const HostTensor& tensor) {
  std::vector<float> values(tensor.bytes.size() / 2);
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, tensor.bytes.data() + 2 * i, 2);
    values[i] = cpu::Bfloat16ToFloat32(bits);
  }
  return values;
}

OpCall::OpCall(const std::string& op_type, const std::string& task_name) : task_name_(task_name) {
  conf_.set_op_type(op_type);
}

OpCall& OpCall::Attribute(const std::string& name, const plan::AttributeValue& value) {
  (*conf_.mutable_attributes())[name] = value;
  return *this;
}

OpCall& OpCall::Input(HostTensor tensor) {
  inputs_.push_back(std::move(tensor));
  return *this;
}

OpCall& OpCall::Output(const Shape& shape, plan::DataType data_type) {
  outputs_.push_back(MakeTensor(shape, data_type));
  return *this;
}

KernelInit OpCall::Init() const {
  KernelInit init;
  init.task_name = task_name_;
  init.conf = &conf_;
  for (const HostTensor& tensor : inputs_) init.inputs.push_back(Describe(tensor));
  for (const HostTensor& tensor : outputs_) init.outputs.push_back(Describe(tensor));
  return init;
}

absl::StatusOr<std::unique_ptr<Kernel>> OpCall::Build() const {
  KernelRegistry registry;
  absl::Status status = RegisterCpuKernels(&registry);
  if (!status.ok()) return status;
  return registry.Create(plan::CPU, Init());
}

absl::Status OpCall::Compute(Kernel& kernel, int64_t piece) {
  std::vector<TensorView> inputs = Views(inputs_);
  std::vector<TensorView> outputs = Views(outputs_);
  KernelContext context;
  context.inputs = inputs;
  context.outputs = outputs;
  context.piece = piece;
  return kernel.Compute(context);
}

absl::Status OpCall::Run(int64_t piece) {
  if (kernel_ == nullptr) {
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = Build();
    if (!kernel.ok()) return kernel.status();
    kernel_ = std::move(*kernel);
  }
  return Compute(*kernel_, piece);
}

}  // namespace loom::kernel_test
