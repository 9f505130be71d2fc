#include "kernels/cpu/kernel_checks.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"

namespace loom::cpu {
namespace {

std::string Count(int64_t count, absl::string_view noun) {
  return absl::StrCat(count, " ", noun, count == 1 ? "" : "s");
}

std::string DescribeView(const TensorView& view) {
  return absl::StrCat(DataTypeName(view.data_type), view.shape.ToString());
}

absl::Status CheckViews(absl::string_view op_type, absl::string_view kind,
                        absl::Span<const TensorView> views, const auto& expected) {
  if (views.size() != expected.size()) {
    return absl::InvalidArgumentError(absl::StrCat(op_type, ": built for ",
                                                   Count(expected.size(), kind),
                                                   " but computed with ", views.size()));
  }
  for (size_t index = 0; index < views.size(); ++index) {
    const TensorView& view = views[index];
    if (view.data_type != expected[index].data_type || view.shape != expected[index].shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(op_type, ": ", kind, " ", index, " is ", DescribeView(view),
                       " at compute time but the kernel was built for ",
                       DataTypeName(expected[index].data_type), expected[index].shape.ToString()));
    }
    if (view.data == nullptr && view.NumElements() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op_type, ": ", kind, " ", index, " has no data"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WithOpType(absl::string_view op_type, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(op_type, ": ", status.message()));
}

std::string DescribeTensor(const plan::TensorDesc& desc) {
  return absl::StrCat(DataTypeName(desc.data_type()), Shape::FromProto(desc).ToString());
}

absl::Status CheckArity(absl::string_view op_type, const KernelInit& init, int num_inputs,
                        int num_outputs) {
  if (static_cast<int>(init.inputs.size()) != num_inputs ||
      static_cast<int>(init.outputs.size()) != num_outputs) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": expects ", Count(num_inputs, "input"), " and ",
                     Count(num_outputs, "output"), ", got ", Count(init.inputs.size(), "input"),
                     " and ", Count(init.outputs.size(), "output")));
  }
  return CheckNoNegativeDimensions(op_type, init);
}

absl::Status CheckNoNegativeDimensions(absl::string_view op_type, const KernelInit& init) {
  for (const auto* descs : {&init.inputs, &init.outputs}) {
    for (size_t index = 0; index < descs->size(); ++index) {
      for (int64_t dimension : (*descs)[index].shape()) {
        if (dimension < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              op_type, ": ", descs == &init.inputs ? "input " : "output ", index, " has shape ",
              Shape::FromProto((*descs)[index]).ToString(), " with a negative dimension"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDataType(absl::string_view op_type, absl::string_view tensor_name,
                           const plan::TensorDesc& desc, plan::DataType expected) {
  if (desc.data_type() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(op_type, ": ", tensor_name, " must be ",
                                                   DataTypeName(expected), ", got ",
                                                   DataTypeName(desc.data_type())));
  }
  return absl::OkStatus();
}

absl::Status CheckIndexDataType(absl::string_view op_type, absl::string_view tensor_name,
                                const plan::TensorDesc& desc) {
  if (desc.data_type() != plan::INT32 && desc.data_type() != plan::INT64) {
    return absl::InvalidArgumentError(absl::StrCat(op_type, ": ", tensor_name,
                                                   " must be int32 or int64, got ",
                                                   DataTypeName(desc.data_type())));
  }
  return absl::OkStatus();
}

absl::Status CheckAllFloat32(absl::string_view op_type, const KernelInit& init) {
  for (size_t index = 0; index < init.inputs.size(); ++index) {
    absl::Status status =
        CheckDataType(op_type, absl::StrCat("input ", index), init.inputs[index], plan::FLOAT32);
    if (!status.ok()) return status;
  }
  for (size_t index = 0; index < init.outputs.size(); ++index) {
    absl::Status status =
        CheckDataType(op_type, absl::StrCat("output ", index), init.outputs[index], plan::FLOAT32);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status CheckSameShape(absl::string_view op_type, absl::string_view expected_name,
                            const Shape& expected, absl::string_view actual_name,
                            const Shape& actual) {
  if (expected != actual) {
    return absl::InvalidArgumentError(absl::StrCat(op_type, ": ", actual_name, " has shape ",
                                                   actual.ToString(), " but ", expected_name,
                                                   " has shape ", expected.ToString()));
  }
  return absl::OkStatus();
}

std::vector<int64_t> RowMajorStrides(const Shape& shape) {
  std::vector<int64_t> strides(shape.rank(), 1);
  for (int axis = shape.rank() - 2; axis >= 0; --axis) {
    strides[axis] = strides[axis + 1] * shape.dimension(axis + 1);
  }
  return strides;
}

std::string DescribeIndex(const Shape& shape, int64_t flat_index) {
  std::vector<int64_t> index(shape.rank(), 0);
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    const int64_t dimension = shape.dimension(axis);
    if (dimension <= 0) continue;
    index[axis] = flat_index % dimension;
    flat_index /= dimension;
  }
  return absl::StrCat("[", absl::StrJoin(index, ", "), "]");
}

TensorSignature::TensorSignature(const KernelInit& init) {
  inputs_.reserve(init.inputs.size());
  for (const plan::TensorDesc& desc : init.inputs) {
    inputs_.push_back({desc.data_type(), Shape::FromProto(desc)});
  }
  outputs_.reserve(init.outputs.size());
  for (const plan::TensorDesc& desc : init.outputs) {
    outputs_.push_back({desc.data_type(), Shape::FromProto(desc)});
  }
}

absl::Status TensorSignature::Check(absl::string_view op_type, const KernelContext& context) const {
  absl::Status status = CheckViews(op_type, "input", context.inputs, inputs_);
  if (!status.ok()) return status;
  return CheckViews(op_type, "output", context.outputs, outputs_);
}

}  // namespace loom::cpu
