#include "actors/compute_actor.h"

#include "kernels/kernel_registry.h"

namespace loom {

absl::Status ComputeActor::Initialize() {
  KernelInit kernel_init;
  kernel_init.task_name = name();
  kernel_init.conf = &task().kernel();
  kernel_init.stream = init().stream;
  kernel_init.files = init().files;
  kernel_init.ending = init().ending;
  // The last ordering_inputs inputs only order the act (plan validation bounds the count).
  const int kernel_inputs = num_inputs() - task().ordering_inputs();
  for (int i = 0; i < kernel_inputs; ++i) {
    const Register* reg = init().inputs[i];
    plan::TensorDesc desc;
    for (int64_t dimension : reg->shape().dimensions()) desc.add_shape(dimension);
    desc.set_data_type(reg->data_type());
    kernel_init.inputs.push_back(desc);
  }
  for (const Register* reg : init().outputs) {
    plan::TensorDesc desc;
    for (int64_t dimension : reg->shape().dimensions()) desc.add_shape(dimension);
    desc.set_data_type(reg->data_type());
    kernel_init.outputs.push_back(desc);
  }
  absl::StatusOr<std::unique_ptr<Kernel>> kernel =
      init().kernels->Create(init().device_type, kernel_init);
  if (!kernel.ok()) return kernel.status();
  kernel_ = std::move(*kernel);
  input_views_.resize(kernel_inputs);
  output_views_.resize(num_outputs());
  return absl::OkStatus();
}

absl::Status ComputeActor::DoAct() {
  int64_t piece = num_inputs() > 0 ? InputPiece(0) : act_count();
  set_current_piece(piece);
  if (!WorksOn(piece)) {
    for (int i = 0; i < num_inputs(); ++i) ConsumeInput(i);
    for (int i = 0; i < num_outputs(); ++i) ProduceOutput(i, piece);
    return absl::OkStatus();
  }
  for (size_t i = 0; i < input_views_.size(); ++i) input_views_[i] = InputView(static_cast<int>(i));
  for (int i = 0; i < num_outputs(); ++i) output_views_[i] = OutputView(i);
  KernelContext context{input_views_, output_views_, piece};
  if (absl::Status status = kernel_->Compute(context); !status.ok()) return status;
  for (int i = 0; i < num_inputs(); ++i) ConsumeInput(i);
  for (int i = 0; i < num_outputs(); ++i) ProduceOutput(i, piece);
  return absl::OkStatus();
}

}  // namespace loom
