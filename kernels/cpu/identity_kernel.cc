#include "kernels/cpu/identity_kernel.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

// Copies input 0 to output 0 (further inputs only order the act).
class IdentityKernel : public Kernel {
 public:
  IdentityKernel(const KernelInit& init, const char* op_type)
      : signature_(init), op_type_(op_type) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(op_type_, context);
    if (!status.ok()) return status;
    const TensorView& input = context.inputs[0];
    const TensorView& output = context.outputs[0];
    if (input.data != output.data && input.ByteSize() > 0) {
      std::memcpy(output.data, input.data, input.ByteSize());
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  const char* const op_type_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateCopyKernel(const KernelInit& init,
                                                         const char* op_type, int num_inputs) {
  absl::Status status = CheckArity(op_type, init, num_inputs, 1);
  if (!status.ok()) return status;
  const plan::DataType data_type = init.inputs[0].data_type();
  if (DataTypeSize(data_type) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": input has no data type (", DataTypeName(data_type), ")"));
  }
  status = CheckDataType(op_type, "output", init.outputs[0], data_type);
  if (!status.ok()) return status;
  status = CheckSameShape(op_type, "input", Shape::FromProto(init.inputs[0]), "output",
                          Shape::FromProto(init.outputs[0]));
  if (!status.ok()) return status;
  return std::make_unique<IdentityKernel>(init, op_type);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateIdentityKernel(const KernelInit& init) {
  return CreateCopyKernel(init, "identity", 1);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateIdentityAfterKernel(const KernelInit& init) {
  // x and at least one input to wait for.
  return CreateCopyKernel(init, "identity_after",
                          std::max(2, static_cast<int>(init.inputs.size())));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateOffloadKernel(const KernelInit& init) {
  return CreateCopyKernel(init, "offload", 1);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateReloadKernel(const KernelInit& init) {
  return CreateCopyKernel(init, "reload", 1);
}

}  // namespace loom::cpu
