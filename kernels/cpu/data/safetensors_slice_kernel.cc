#include "kernels/cpu/data/safetensors_slice_kernel.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"
#include "core/file_roots.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "safetensors_slice";

std::string DescribeList(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

struct SliceOptions {
  std::string path;
  std::string tensor;
  std::vector<int64_t> logical_shape;
  std::vector<int64_t> slice_begin;
};

absl::StatusOr<SliceOptions> ParseOptions(const plan::KernelConf& conf, const Shape& output) {
  Attributes attributes(conf);
  SliceOptions options;
  absl::StatusOr<std::string> path = attributes.GetString("path");
  if (!path.ok()) return WithOpType(kOpType, path.status());
  options.path = *std::move(path);
  absl::StatusOr<std::string> tensor = attributes.GetString("tensor");
  if (!tensor.ok()) return WithOpType(kOpType, tensor.status());
  options.tensor = *std::move(tensor);

  absl::StatusOr<std::vector<int64_t>> logical = attributes.GetIntList("logical_shape");
  if (!logical.ok()) return WithOpType(kOpType, logical.status());
  options.logical_shape = *std::move(logical);
  const int rank = output.rank();
  if (static_cast<int>(options.logical_shape.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType, ": tensor '", options.tensor, "': attribute 'logical_shape' ",
        DescribeList(options.logical_shape), " has rank ", options.logical_shape.size(),
        " but the output ", output.ToString(), " has rank ", rank));
  }
  options.slice_begin.assign(rank, 0);
  if (attributes.Has("slice_begin")) {
    absl::StatusOr<std::vector<int64_t>> begin = attributes.GetIntList("slice_begin");
    if (!begin.ok()) return WithOpType(kOpType, begin.status());
    if (static_cast<int>(begin->size()) != rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOpType, ": tensor '", options.tensor, "': attribute 'slice_begin' ",
          DescribeList(*begin), " has ", begin->size(), " entries but the output has rank ", rank));
    }
    options.slice_begin = *std::move(begin);
  }
  for (int axis = 0; axis < rank; ++axis) {
    const int64_t begin = options.slice_begin[axis];
    const int64_t logical_dimension = options.logical_shape[axis];
    if (begin < 0 || logical_dimension < 0 || begin > logical_dimension - output.dimension(axis)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOpType, ": tensor '", options.tensor,
                       "': the output window at slice_begin ", DescribeList(options.slice_begin),
                       " of shape ", output.ToString(), " does not lie inside logical_shape ",
                       DescribeList(options.logical_shape), " (axis ", axis, ")"));
    }
  }
  return options;
}

class SafetensorsSliceKernel : public Kernel {
 public:
  SafetensorsSliceKernel(const KernelInit& init, HostTensor window)
      : signature_(init), window_(std::move(window)) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    if (!window_.bytes.empty()) {
      std::memcpy(context.outputs[0].data, window_.bytes.data(), window_.bytes.size());
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  HostTensor window_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateSafetensorsSliceKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 0, 1);
  if (!status.ok()) return status;
  const plan::TensorDesc& output_desc = init.outputs[0];
  const Shape output = Shape::FromProto(output_desc);
  absl::StatusOr<SliceOptions> options = ParseOptions(*init.conf, output);
  if (!options.ok()) return options.status();

  if (init.files == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(kOpType, ": tensor '", options->tensor,
                                                    "': cannot open checkpoint '", options->path,
                                                    "': this run may open no files"));
  }
  absl::StatusOr<ReadableFile> file = init.files->OpenForReading(options->path);
  absl::StatusOr<std::unique_ptr<checkpoint::SafetensorsReader>> reader =
      file.ok() ? checkpoint::SafetensorsReader::Open(*std::move(file))
                : absl::StatusOr<std::unique_ptr<checkpoint::SafetensorsReader>>(file.status());
  if (!reader.ok()) {
    return absl::Status(reader.status().code(),
                        absl::StrCat(kOpType, ": tensor '", options->tensor,
                                     "': cannot read the checkpoint: ", reader.status().message()));
  }
  const checkpoint::SafetensorsTensorInfo* info = (*reader)->Find(options->tensor);
  const std::string where =
      absl::StrCat("checkpoint '", options->path, "' tensor '", options->tensor, "'");
  if (info == nullptr) {
    return absl::NotFoundError(absl::StrCat(kOpType, ": checkpoint '", options->path,
                                            "' has no tensor '", options->tensor, "'"));
  }
  if (info->data_type != output_desc.data_type()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": ", where, " is ", DataTypeName(info->data_type),
                     info->shape.ToString(), " but the output is ", DescribeTensor(output_desc),
                     ": the data types must match (convert the checkpoint or the variable)"));
  }
  if (info->shape != Shape(options->logical_shape)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType, ": ", where, " has shape ", info->shape.ToString(),
        " but the variable's logical shape is ", DescribeList(options->logical_shape)));
  }
  absl::StatusOr<HostTensor> window =
      (*reader)->ReadWindow(options->tensor, options->slice_begin, output);
  if (!window.ok()) {
    return absl::Status(window.status().code(),
                        absl::StrCat(kOpType, ": ", window.status().message()));
  }
  return std::make_unique<SafetensorsSliceKernel>(init, *std::move(window));
}

}  // namespace loom::cpu
