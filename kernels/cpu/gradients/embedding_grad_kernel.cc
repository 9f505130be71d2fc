#include "kernels/cpu/gradients/embedding_grad_kernel.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"
#include "runtime/data_type.h"
#include "runtime/tensor.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "embedding_grad";

template <typename Id>
class EmbeddingGradKernel : public Kernel {
 public:
  EmbeddingGradKernel(const KernelInit& init, int64_t rows, int64_t width, int64_t row_offset,
                      int64_t logical_rows)
      : signature_(init),
        rows_(rows),
        width_(width),
        row_offset_(row_offset),
        logical_rows_(logical_rows) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    const TensorView& ids_view = context.inputs[0];
    const Id* ids = ids_view.Data<const Id>();
    const float* dy = context.inputs[1].Data<const float>();
    float* dtable = context.outputs[0].Data<float>();
    std::fill(dtable, dtable + rows_ * width_, 0.0f);
    const int64_t count = ids_view.NumElements();
    for (int64_t position = 0; position < count; ++position) {
      const int64_t id = static_cast<int64_t>(ids[position]);
      if (id < 0 || id >= logical_rows_) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOpType, ": id ", id, " at ids", DescribeIndex(ids_view.shape, position),
            " is outside [0, ",
            logical_rows_ == std::numeric_limits<int64_t>::max() ? "inf"
                                                                 : absl::StrCat(logical_rows_),
            ")"));
      }
      const int64_t local = id - row_offset_;
      if (local < 0 || local >= rows_) continue;
      const float* source = dy + position * width_;
      float* destination = dtable + local * width_;
      for (int64_t i = 0; i < width_; ++i) destination[i] += source[i];
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  int64_t rows_;
  int64_t width_;
  int64_t row_offset_;
  // Ids at or above it are rejected (int64 max when unknown).
  int64_t logical_rows_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateEmbeddingGradKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 2, 1);
  if (!status.ok()) return status;
  const plan::DataType id_type = init.inputs[0].data_type();
  if (id_type != plan::INT32 && id_type != plan::INT64) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": input 'ids' must be int32 or int64, got ", DataTypeName(id_type)));
  }
  status = CheckDataType(kOpType, "input 'dy'", init.inputs[1], plan::FLOAT32);
  if (!status.ok()) return status;
  status = CheckDataType(kOpType, "output 'dtable'", init.outputs[0], plan::FLOAT32);
  if (!status.ok()) return status;
  const Shape ids = Shape::FromProto(init.inputs[0]);
  const Shape dy = Shape::FromProto(init.inputs[1]);
  const Shape dtable = Shape::FromProto(init.outputs[0]);
  if (dtable.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType, ": output 'dtable' must have rank 2 [rows, width], got ", dtable.ToString()));
  }
  const int64_t rows = dtable.dimension(0);
  const int64_t width = dtable.dimension(1);
  std::vector<int64_t> expected_dimensions(ids.dimensions().begin(), ids.dimensions().end());
  expected_dimensions.push_back(width);
  const Shape expected(expected_dimensions);
  if (dy != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": input 'dy' has shape ", dy.ToString(), " but ids ", ids.ToString(),
                     " of table ", dtable.ToString(), " give ", expected.ToString()));
  }
  Attributes attributes(*init.conf);
  absl::StatusOr<int64_t> row_offset = attributes.GetInt("row_offset", 0);
  if (!row_offset.ok()) return WithOpType(kOpType, row_offset.status());
  if (*row_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": attribute 'row_offset' must be >= 0, got ", *row_offset));
  }
  int64_t logical_rows = *row_offset == 0 ? rows : std::numeric_limits<int64_t>::max();
  if (attributes.Has("logical_rows")) {
    absl::StatusOr<int64_t> given = attributes.GetInt("logical_rows");
    if (!given.ok()) return WithOpType(kOpType, given.status());
    if (*given < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOpType, ": attribute 'logical_rows' must be >= 0, got ", *given));
    }
    logical_rows = *given;
  }
  if (id_type == plan::INT32) {
    return std::make_unique<EmbeddingGradKernel<int32_t>>(init, rows, width, *row_offset,
                                                          logical_rows);
  }
  return std::make_unique<EmbeddingGradKernel<int64_t>>(init, rows, width, *row_offset,
                                                        logical_rows);
}

}  // namespace loom::cpu
