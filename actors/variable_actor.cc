#include "actors/variable_actor.h"

#include "absl/strings/str_cat.h"
#include "kernels/kernel_registry.h"

namespace loom {
namespace {

plan::TensorDesc DescOf(const Register& reg) {
  plan::TensorDesc desc;
  for (int64_t dimension : reg.shape().dimensions()) desc.add_shape(dimension);
  desc.set_data_type(reg.data_type());
  return desc;
}

}  // namespace

VariableActor::~VariableActor() {
  for (const TensorView& state : states_) init().memory->Free(state.data);
}

absl::Status VariableActor::Initialize() {
  const Register& value = *init().outputs[0];
  const plan::TensorDesc value_desc = DescOf(value);

  KernelInit initializer_init;

  initializer_init.stream = init().stream;
  initializer_init.files = init().files;
  initializer_init.ending = init().ending;
  initializer_init.task_name = name();
  initializer_init.conf = &task().initializer();
  initializer_init.outputs.push_back(value_desc);
  absl::StatusOr<std::unique_ptr<Kernel>> initializer =
      init().kernels->Create(init().device_type, initializer_init);
  if (!initializer.ok()) return initializer.status();
  initializer_ = std::move(*initializer);

  for (int i = 0; i < task().num_optimizer_states(); ++i) {
    absl::StatusOr<void*> buffer = init().memory->Allocate(
        value.slot_bytes(), absl::StrCat("optimizer state ", i, " of '", name(), "'"));
    if (!buffer.ok()) return buffer.status();
    states_.push_back(TensorView{*buffer, value.data_type(), value.shape()});
  }

  if (task().state_initializers_size() > 0) {
    if (task().state_initializers_size() != task().num_optimizer_states()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "task '", name(), "': ", task().state_initializers_size(), " state_initializers for ",
          task().num_optimizer_states(),
          " optimizer states; give one per state, or none to start the states at zero"));
    }
    for (int i = 0; i < task().state_initializers_size(); ++i) {
      KernelInit state_init;
      state_init.stream = init().stream;
      state_init.files = init().files;
      state_init.ending = init().ending;
      state_init.task_name = name();
      state_init.conf = &task().state_initializers(i);
      state_init.outputs.push_back(value_desc);
      absl::StatusOr<std::unique_ptr<Kernel>> kernel =
          init().kernels->Create(init().device_type, state_init);
      if (!kernel.ok()) {
        return absl::Status(kernel.status().code(),
                            absl::StrCat("the initializer of optimizer state ", i, ": ",
                                         kernel.status().message()));
      }
      state_initializers_.push_back(std::move(*kernel));
    }
  }
  if (!has_gradient()) return absl::OkStatus();

  KernelInit optimizer_init;

  optimizer_init.stream = init().stream;
  optimizer_init.files = init().files;
  optimizer_init.ending = init().ending;
  optimizer_init.task_name = name();
  optimizer_init.conf = &task().kernel();
  optimizer_init.inputs = {value_desc, DescOf(*init().inputs[0])};
  optimizer_init.outputs = {value_desc};
  for (int i = 0; i < task().num_optimizer_states(); ++i) {
    optimizer_init.inputs.push_back(value_desc);
    optimizer_init.outputs.push_back(value_desc);
  }
  absl::StatusOr<std::unique_ptr<Kernel>> optimizer =
      init().kernels->Create(init().device_type, optimizer_init);
  if (!optimizer.ok()) return optimizer.status();
  optimizer_ = std::move(*optimizer);
  optimizer_inputs_.resize(optimizer_init.inputs.size());
  optimizer_outputs_.resize(optimizer_init.outputs.size());
  return absl::OkStatus();
}

TensorView VariableActor::value() const { return init().outputs[0]->SlotView(0); }

absl::StatusOr<HostTensor> VariableActor::CopyToHost(const TensorView& view) const {
  absl::StatusOr<HostTensor> tensor = EnqueueCopyToHost(*init().stream, view);
  absl::Status status = tensor.ok() ? init().stream->Synchronize() : tensor.status();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("task '", task().name(),
                                                    "': reading its value: ", status.message()));
  }
  return tensor;
}

absl::StatusOr<VariableOnHost> VariableActor::CopyVariableToHost() const {
  VariableOnHost copy;
  absl::StatusOr<HostTensor> value = CopyToHost(this->value());
  if (!value.ok()) return value.status();
  copy.value = *std::move(value);
  for (const TensorView& state : states_) {
    absl::StatusOr<HostTensor> piece = CopyToHost(state);
    if (!piece.ok()) return piece.status();
    copy.states.push_back(*std::move(piece));
  }
  return copy;
}

absl::Status VariableActor::MaybeSnapshot(int64_t step) const {
  const int64_t every = init().snapshot_every_steps;
  const VariableSnapshotCallback* callback = init().variable_snapshot_callback;
  if (every <= 0 || callback == nullptr || !*callback) return absl::OkStatus();
  // The last step's state is read from the actor after the job.
  if (step % every != 0 || step >= steps()) return absl::OkStatus();
  absl::StatusOr<VariableOnHost> copy = CopyVariableToHost();
  if (!copy.ok()) return copy.status();
  absl::Status status = (*callback)(VariableSnapshot{name(), step, *std::move(copy)});
  if (!status.ok()) {
    return absl::Status(status.code(),
                        absl::StrCat("the snapshot after step ", step, ": ", status.message()));
  }
  return absl::OkStatus();
}

bool VariableActor::CanAct() const {
  // The value is written in place: every act needs the slot back from its readers.
  if (!OutputFree(0)) return false;
  return act_count() == 0 || !has_gradient() || InputReady(0);
}

bool VariableActor::IsExhausted() const {
  const int64_t acts = has_gradient() && steps() > 0 ? steps() + 1 : steps();
  if (act_count() >= acts) return true;
  // A gradient stream that ended early (a misconfigured plan) must not leave the actor waiting.
  return has_gradient() && act_count() > 0 && InputEnded(0) && !InputReady(0);
}

absl::Status VariableActor::DoAct() {
  const int64_t act = act_count();
  set_current_piece(act);
  if (act == 0) {
    TensorView view = OutputView(0);
    KernelContext context{{}, absl::MakeConstSpan(&view, 1), 0};
    if (absl::Status status = initializer_->Compute(context); !status.ok()) return status;
    for (size_t i = 0; i < state_initializers_.size(); ++i) {
      KernelContext state_context{{}, absl::MakeConstSpan(&states_[i], 1), 0};
      if (absl::Status status = state_initializers_[i]->Compute(state_context); !status.ok()) {
        return absl::Status(status.code(), absl::StrCat("the initializer of optimizer state ", i,
                                                        ": ", status.message()));
      }
    }
  } else if (has_gradient()) {
    set_current_piece(act - 1);
    TensorView view = OutputView(0);
    optimizer_inputs_[0] = view;
    optimizer_inputs_[1] = InputView(0);
    optimizer_outputs_[0] = view;
    for (size_t i = 0; i < states_.size(); ++i) {
      optimizer_inputs_[2 + i] = states_[i];
      optimizer_outputs_[1 + i] = states_[i];
    }
    KernelContext context{optimizer_inputs_, optimizer_outputs_, act - 1};
    if (absl::Status status = optimizer_->Compute(context); !status.ok()) return status;
    ConsumeInput(0);
  }
  // The value is now as it is after `act` steps (an update k = act, or none for a frozen one).
  if (act > 0) {
    if (absl::Status status = MaybeSnapshot(act); !status.ok()) return status;
  }
  if (act < steps()) ProduceOutput(0, act);
  return absl::OkStatus();
}

}  // namespace loom
