#include "kernels/cpu/embedding_kernel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
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

constexpr char kOpType[] = "embedding";

template <typename Id>
class EmbeddingKernel : public Kernel {
 public:
  EmbeddingKernel(const KernelInit& init, int64_t rows, int64_t width, int64_t row_offset,
                  int64_t logical_rows)
      : signature_(init),
        rows_(rows),
        width_(width),
        row_offset_(row_offset),
        logical_rows_(logical_rows) {}

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
      if (id < 0 || id >= logical_rows_) {
        return absl::InvalidArgumentError(absl::StrCat(
            kOpType, ": id ", id, " at ids", DescribeIndex(ids_view.shape, position),
            " is outside [0, ",
            logical_rows_ == std::numeric_limits<int64_t>::max() ? "inf"
                                                                 : absl::StrCat(logical_rows_),
            ")"));
      }
      float* row = output + position * width_;
      const int64_t local = id - row_offset_;
      if (local >= 0 && local < rows_) {
        if (width_ > 0) std::memcpy(row, table + local * width_, width_ * sizeof(float));
      } else {
        std::fill(row, row + width_, 0.0f);
      }
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

absl::StatusOr<std::unique_ptr<Kernel>> CreateEmbeddingKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 2, 1);
  if (!status.ok()) return status;
  status = CheckDataType(kOpType, "input 'table'", init.inputs[0], plan::FLOAT32);
  if (!status.ok()) return status;
  const plan::DataType id_type = init.inputs[1].data_type();
  if (id_type != plan::INT32 && id_type != plan::INT64) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": input 'ids' must be int32 or int64, got ", DataTypeName(id_type)));
  }
  status = CheckDataType(kOpType, "output", init.outputs[0], plan::FLOAT32);
  if (!status.ok()) return status;
  const Shape table = Shape::FromProto(init.inputs[0]);
  const Shape ids = Shape::FromProto(init.inputs[1]);
  const Shape output = Shape::FromProto(init.outputs[0]);
  if (table.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType, ": input 'table' must have rank 2 [rows, width], got ", table.ToString()));
  }
  const int64_t rows = table.dimension(0);
  const int64_t width = table.dimension(1);
  std::vector<int64_t> expected_dimensions(ids.dimensions().begin(), ids.dimensions().end());
  expected_dimensions.push_back(width);
  const Shape expected(expected_dimensions);
  if (output != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": output has shape ", output.ToString(), " but ids ", ids.ToString(),
                     " of table ", table.ToString(), " give ", expected.ToString()));
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
    return std::make_unique<EmbeddingKernel<int32_t>>(init, rows, width, *row_offset, logical_rows);
  }
  return std::make_unique<EmbeddingKernel<int64_t>>(init, rows, width, *row_offset, logical_rows);
}

}  // namespace loom::cpu
