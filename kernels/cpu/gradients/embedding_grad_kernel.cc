#include "kernels/cpu/gradients/embedding_grad_kernel.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "kernels/cpu/embedding_row_range.h"
#include "kernels/cpu/embedding_shapes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "embedding_grad";

template <typename Id>
class EmbeddingGradKernel : public Kernel {
 public:
  EmbeddingGradKernel(const KernelInit& init, int64_t width, const EmbeddingRowRange& row_range)
      : signature_(init), width_(width), row_range_(row_range) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    const TensorView& ids_view = context.inputs[0];
    const Id* ids = ids_view.Data<const Id>();
    const float* dy = context.inputs[1].Data<const float>();
    float* dtable = context.outputs[0].Data<float>();
    std::fill(dtable, dtable + row_range_.rows * width_, 0.0f);
    const int64_t count = ids_view.NumElements();
    for (int64_t position = 0; position < count; ++position) {
      const int64_t id = static_cast<int64_t>(ids[position]);
      status = row_range_.CheckId(kOpType, id, ids_view.shape, position);
      if (!status.ok()) return status;
      const int64_t local = row_range_.LocalRow(id);
      if (local < 0) continue;
      const float* source = dy + position * width_;
      float* destination = dtable + local * width_;
      for (int64_t i = 0; i < width_; ++i) destination[i] += source[i];
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t width_;
  EmbeddingRowRange row_range_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateEmbeddingGradKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 2, 1);
  if (!status.ok()) return status;
  status = CheckIndexDataType(kOpType, "input 'ids'", init.inputs[0]);
  if (!status.ok()) return status;
  status = CheckDataType(kOpType, "input 'dy'", init.inputs[1], plan::FLOAT32);
  if (!status.ok()) return status;
  status = CheckDataType(kOpType, "output 'dtable'", init.outputs[0], plan::FLOAT32);
  if (!status.ok()) return status;
  absl::StatusOr<EmbeddingTableShape> table = CheckEmbeddingShapes(
      kOpType, "output 'dtable'", Shape::FromProto(init.outputs[0]),
      Shape::FromProto(init.inputs[0]), "input 'dy'", Shape::FromProto(init.inputs[1]));
  if (!table.ok()) return table.status();
  const int64_t width = table->width;
  absl::StatusOr<EmbeddingRowRange> row_range = ReadEmbeddingRowRange(kOpType, init, table->rows);
  if (!row_range.ok()) return row_range.status();
  if (init.inputs[0].data_type() == plan::INT32) {
    return std::make_unique<EmbeddingGradKernel<int32_t>>(init, width, *row_range);
  }
  return std::make_unique<EmbeddingGradKernel<int64_t>>(init, width, *row_range);
}

}  // namespace loom::cpu
