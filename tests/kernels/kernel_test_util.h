#ifndef LOOM_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
#define LOOM_TESTS_KERNELS_KERNEL_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "kernels/kernel.h"
#include "proto/plan.pb.h"

namespace loom::kernel_test {

plan::AttributeValue IntAttribute(int64_t value);
plan::AttributeValue FloatAttribute(double value);
plan::AttributeValue BoolAttribute(bool value);
plan::AttributeValue StringAttribute(const std::string& value);
plan::AttributeValue IntListAttribute(const std::vector<int64_t>& values);

// A zeroed host tensor.
HostTensor MakeTensor(const Shape& shape, plan::DataType data_type = plan::FLOAT32);
// A float32 tensor holding `values` (as many as the shape has elements).
HostTensor FloatTensor(const Shape& shape, const std::vector<float>& values);
// An int32 or int64 tensor holding `values`.
HostTensor Int32Tensor(const Shape& shape, const std::vector<int32_t>& values);
HostTensor Int64Tensor(const Shape& shape, const std::vector<int64_t>& values);
// `count` values uniform in [low, high) from a fixed-seed engine.
std::vector<float> RandomFloats(int64_t count, uint32_t seed, float low = -1.0f, float high = 1.0f);
std::vector<float> FloatValues(const HostTensor& tensor);
// `values` rounded to bfloat16: the tensor, and the rounded values as float32 in `rounded`.
HostTensor Bfloat16Tensor(const Shape& shape, const std::vector<float>& values,
                          std::vector<float>* rounded);
// The values of a bfloat16 tensor, widened to float32.
std::vector<float> WidenedValues(const HostTensor& tensor);

// One op to build through a registry filled by RegisterCpuKernels and to run on host tensors.
// Holds the KernelConf that a built KernelInit points to, so it is neither copied nor moved.
class OpCall {
 public:
  explicit OpCall(const std::string& op_type, const std::string& task_name = "test_task");
  OpCall(const OpCall&) = delete;
  OpCall& operator=(const OpCall&) = delete;

  OpCall& Attribute(const std::string& name, const plan::AttributeValue& value);
  OpCall& Input(HostTensor tensor);
  // A zeroed output.
  OpCall& Output(const Shape& shape, plan::DataType data_type = plan::FLOAT32);

  KernelInit Init() const;
  // Builds a fresh kernel for this call's configuration and tensors.
  absl::StatusOr<std::unique_ptr<Kernel>> Build() const;
  // Runs `kernel` once on this call's tensors.
  absl::Status Compute(Kernel& kernel, int64_t piece = 0);
  // Builds (the first time) and runs the kernel once.
  absl::Status Run(int64_t piece = 0);

  HostTensor& input(int index) { return inputs_[index]; }
  HostTensor& output(int index) { return outputs_[index]; }
  std::vector<float> OutputFloats(int index = 0) const { return FloatValues(outputs_[index]); }

 private:
  std::string task_name_;
  plan::KernelConf conf_;
  std::vector<HostTensor> inputs_;
  std::vector<HostTensor> outputs_;
  std::unique_ptr<Kernel> kernel_;
};

}  // namespace loom::kernel_test

#endif  // LOOM_TESTS_KERNELS_KERNEL_TEST_UTIL_H_
