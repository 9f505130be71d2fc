#include "kernels/flat_pack_kernels.h"

#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/checked_arithmetic.h"
#include "core/data_type.h"
#include "core/tensor.h"

namespace loom {
namespace {

// Copies between one flat tensor and its parts, in the parts' order.
class FlatPackKernel final : public Kernel {
 public:
  FlatPackKernel(bool pack, StreamContext* stream) : pack_(pack), stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    const TensorView& flat = pack_ ? context.outputs[0] : context.inputs[0];
    absl::Span<const TensorView> parts = pack_ ? context.inputs : context.outputs;
    char* flat_bytes = static_cast<char*>(flat.data);
    int64_t offset = 0;
    for (const TensorView& part : parts) {
      const int64_t bytes = part.ByteSize();
      void* destination = pack_ ? flat_bytes + offset : part.data;
      const void* source = pack_ ? static_cast<const void*>(part.data) : flat_bytes + offset;
      if (stream_ != nullptr) {
        if (absl::Status status = stream_->Copy(destination, source, bytes); !status.ok()) {
          return status;
        }
      } else if (bytes > 0) {
        std::memcpy(destination, source, static_cast<size_t>(bytes));
      }
      offset += bytes;
    }
    return absl::OkStatus();
  }

 private:
  const bool pack_;
  StreamContext* const stream_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateFlatPack(const KernelInit& init, bool pack) {
  const char* op = pack ? "pack_flat" : "unpack_flat";
  const std::vector<plan::TensorDesc>& flat_side = pack ? init.outputs : init.inputs;
  const std::vector<plan::TensorDesc>& parts = pack ? init.inputs : init.outputs;
  auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("task '", init.task_name, "': ", op, ": ", why));
  };
  if (flat_side.size() != 1 || parts.empty()) {
    return invalid(absl::StrCat(
        "takes ", pack ? "parts and makes one flat tensor" : "one flat tensor and makes parts",
        ", not ", init.inputs.size(), " inputs and ", init.outputs.size(), " outputs"));
  }
  const plan::TensorDesc& flat = flat_side[0];
  int64_t elements = 0;
  for (const plan::TensorDesc& part : parts) {
    if (part.data_type() != flat.data_type()) {
      return invalid(absl::StrCat("a part is ", DataTypeName(part.data_type()),
                                  ", the flat tensor ", DataTypeName(flat.data_type())));
    }
    const std::optional<int64_t> sum =
        CheckedAdd(elements, Shape::FromProto(part).NumElements());
    if (!sum.has_value()) return invalid("the parts' elements overflow a 64-bit count");
    elements = *sum;
  }
  const Shape flat_shape = Shape::FromProto(flat);
  if (flat_shape.rank() != 1 || flat_shape.dimension(0) != elements) {
    return invalid(absl::StrCat("the flat tensor is ", flat_shape.ToString(), ", not [", elements,
                                "] (the parts' elements)"));
  }
  return std::make_unique<FlatPackKernel>(pack, init.stream);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreatePackFlatKernel(const KernelInit& init) {
  return CreateFlatPack(init, /*pack=*/true);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateUnpackFlatKernel(const KernelInit& init) {
  return CreateFlatPack(init, /*pack=*/false);
}

}  // namespace loom
