#include "kernels/cpu/embedding_kernel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "kernels/cpu/embedding_row_range.h"
#include "kernels/cpu/embedding_shapes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "embedding";

template <typename Id>
class EmbeddingKernel : public Kernel {
 public:
  EmbeddingKernel(const KernelInit& init, int64_t width, const EmbeddingRowRange& row_range)
      : signature_(init), width_(width), row_range_(row_range) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    const float* table = context.inputs[0].Data<const float>();
    const TensorView& ids_view = context.inputs[1];
    const Id* ids = ids_view.Data<const Id>();
    float* output = context.outputs[0].Data<float>();
    const int64_t count = ids_view.NumElements();
    for (int64_t position = 0; position < count; ++position) {
      const int64_t id = static_cast<int64_t>(ids[position]);
      status = row_range_.CheckId(kOpType, id, ids_view.shape, position);
      if (!status.ok()) return status;
      float* row = output + position * width_;
      const int64_t local = row_range_.LocalRow(id);
      if (local >= 0) {
        if (width_ > 0) std::memcpy(row, table + local * width_, width_ * sizeof(float));
      } else {
        std::fill(row, row + width_, 0.0f);
      }
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t width_;
  EmbeddingRowRange row_range_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateEmbeddingKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 2, 1);
  if (!status.ok()) return status;
  status = CheckDataType(kOpType, "input 'table'", init.inputs[0], plan::FLOAT32);
  if (!status.ok()) return status;
  status = CheckIndexDataType(kOpType, "input 'ids'", init.inputs[1]);
  if (!status.ok()) return status;
  status = CheckDataType(kOpType, "output", init.outputs[0], plan::FLOAT32);
  if (!status.ok()) return status;
  absl::StatusOr<EmbeddingTableShape> table = CheckEmbeddingShapes(
      kOpType, "input 'table'", Shape::FromProto(init.inputs[0]), Shape::FromProto(init.inputs[1]),
      "output", Shape::FromProto(init.outputs[0]));
  if (!table.ok()) return table.status();
  const int64_t width = table->width;
  absl::StatusOr<EmbeddingRowRange> row_range = ReadEmbeddingRowRange(kOpType, init, table->rows);
  if (!row_range.ok()) return row_range.status();
  if (init.inputs[1].data_type() == plan::INT32) {
    return std::make_unique<EmbeddingKernel<int32_t>>(init, width, *row_range);
  }
  return std::make_unique<EmbeddingKernel<int64_t>>(init, width, *row_range);
}

}  // namespace loom::cpu
