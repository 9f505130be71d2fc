#include "tests/kernels/optimizers/optimizer_test_util.h"

#include <limits>
#include <utility>

#include "kernels/cpu/optimizers/optimizer_kernels.h"
#include "kernels/kernel_registry.h"

namespace loom::kernel_test {

absl::StatusOr<std::unique_ptr<Kernel>> BuildOptimizerKernel(const OpCall& call) {
  KernelRegistry registry;
  absl::Status status = RegisterCpuOptimizerKernels(&registry);
  if (!status.ok()) return status;
  return registry.Create(plan::CPU, call.Init());
}

absl::Status ComputeInPlace(Kernel& kernel, std::vector<HostTensor>& inputs,
                            const std::vector<int>& output_to_input, int64_t piece) {
  std::vector<TensorView> input_views;
  for (HostTensor& tensor : inputs) input_views.push_back(tensor.View());
  std::vector<TensorView> output_views;
  for (int index : output_to_input) output_views.push_back(input_views[index]);
  KernelContext context;
  context.inputs = input_views;
  context.outputs = output_views;
  context.piece = piece;
  return kernel.Compute(context);
}

void DeclareTensors(OpCall& call, const Shape& shape, int num_inputs, int num_outputs) {
  for (int index = 0; index < num_inputs; ++index) call.Input(MakeTensor(shape));
  for (int index = 0; index < num_outputs; ++index) call.Output(shape);
}

absl::StatusOr<OptimizerSteps> RunOptimizer(const OpCall& call, const Shape& shape,
                                            const std::vector<std::vector<float>>& initial,
                                            const std::vector<std::vector<float>>& grads,
                                            bool in_place, int64_t first_piece) {
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildOptimizerKernel(call);
  if (!kernel.ok()) return kernel.status();
  // Inputs: param, grad, states. Output j is param (j = 0) or state j - 1, input j + 1 (j > 0).
  std::vector<HostTensor> inputs;
  inputs.push_back(FloatTensor(shape, initial[0]));
  inputs.push_back(MakeTensor(shape));
  for (size_t state = 1; state < initial.size(); ++state) {
    inputs.push_back(FloatTensor(shape, initial[state]));
  }
  std::vector<int> output_to_input = {0};
  for (size_t state = 1; state < initial.size(); ++state) {
    output_to_input.push_back(static_cast<int>(state) + 1);
  }
  OptimizerSteps steps;
  for (size_t step = 0; step < grads.size(); ++step) {
    inputs[1] = FloatTensor(shape, grads[step]);
    const int64_t piece = first_piece + static_cast<int64_t>(step);
    std::vector<std::vector<float>> outputs;
    if (in_place) {
      absl::Status status = ComputeInPlace(**kernel, inputs, output_to_input, piece);
      if (!status.ok()) return status;
      for (int index : output_to_input) outputs.push_back(FloatValues(inputs[index]));
    } else {
      std::vector<HostTensor> output_tensors;
      for (size_t index = 0; index < output_to_input.size(); ++index) {
        output_tensors.push_back(FloatTensor(
            shape,
            std::vector<float>(shape.NumElements(), std::numeric_limits<float>::quiet_NaN())));
      }
      std::vector<TensorView> input_views;
      for (HostTensor& tensor : inputs) input_views.push_back(tensor.View());
      std::vector<TensorView> output_views;
      for (HostTensor& tensor : output_tensors) output_views.push_back(tensor.View());
      KernelContext context;
      context.inputs = input_views;
      context.outputs = output_views;
      context.piece = piece;
      absl::Status status = (*kernel)->Compute(context);
      if (!status.ok()) return status;
      for (size_t index = 0; index < output_to_input.size(); ++index) {
        outputs.push_back(FloatValues(output_tensors[index]));
        inputs[output_to_input[index]] = std::move(output_tensors[index]);
      }
    }
    steps.push_back(std::move(outputs));
  }
  return steps;
}

std::vector<float> GoldenRow(absl::Span<const float> values, int64_t row_size, int64_t row) {
  absl::Span<const float> slice = values.subspan(row * row_size, row_size);
  return std::vector<float>(slice.begin(), slice.end());
}

}  // namespace loom::kernel_test
