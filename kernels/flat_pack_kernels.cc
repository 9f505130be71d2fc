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

// Copies between one flat tensor and its parts, in the parts' order: each part whole (shards = 1),
// or shard 0 of every part, then shard 1 of every part, ... (each part's bytes split in `shards`
// equal runs).
class FlatPackKernel final : public Kernel {
 public:
  FlatPackKernel(bool pack, int64_t shards, StreamContext* stream)
      : pack_(pack), shards_(shards), stream_(stream) {}

  absl::Status Compute(const KernelContext& context) override {
    const TensorView& flat = pack_ ? context.outputs[0] : context.inputs[0];
    absl::Span<const TensorView> parts = pack_ ? context.inputs : context.outputs;
    char* flat_bytes = static_cast<char*>(flat.data);
    int64_t offset = 0;
    for (int64_t shard = 0; shard < shards_; ++shard) {
      for (const TensorView& part : parts) {
        const int64_t bytes = part.ByteSize() / shards_;
        char* part_bytes = static_cast<char*>(part.data) + shard * bytes;
        void* destination = pack_ ? flat_bytes + offset : part_bytes;
        const void* source = pack_ ? part_bytes : flat_bytes + offset;
        if (stream_ != nullptr) {
          if (absl::Status status = stream_->Copy(destination, source, bytes); !status.ok()) {
            return status;
          }
        } else if (bytes > 0) {
          std::memcpy(destination, source, static_cast<size_t>(bytes));
        }
        offset += bytes;
      }
    }
    return absl::OkStatus();
  }

 private:
  const bool pack_;
  const int64_t shards_;
  StreamContext* const stream_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateFlatPack(const KernelInit& init, bool pack,
                                                       bool sharded) {
  const char* op =
      sharded ? (pack ? "pack_shards" : "unpack_shards") : (pack ? "pack_flat" : "unpack_flat");
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
  int64_t shards = 1;
  if (sharded) {
    if (init.conf == nullptr) return invalid("needs an int attribute \"shards\" >= 1");
    auto value = init.conf->attributes().find("shards");
    if (value == init.conf->attributes().end() || !value->second.has_int_value() ||
        value->second.int_value() < 1) {
      return invalid("needs an int attribute \"shards\" >= 1");
    }
    shards = value->second.int_value();
  }
  const plan::TensorDesc& flat = flat_side[0];
  int64_t elements = 0;
  for (const plan::TensorDesc& part : parts) {
    if (part.data_type() != flat.data_type()) {
      return invalid(absl::StrCat("a part is ", DataTypeName(part.data_type()),
                                  ", the flat tensor ", DataTypeName(flat.data_type())));
    }
    if (shards > 1 && (part.shape_size() == 0 || part.shape(0) % shards != 0)) {
      return invalid(absl::StrCat("a part is ", Shape::FromProto(part).ToString(),
                                  ", whose axis 0 is not split in ", shards, " shards"));
    }
    const std::optional<int64_t> sum = CheckedAdd(elements, Shape::FromProto(part).NumElements());
    if (!sum.has_value()) return invalid("the parts' elements overflow a 64-bit count");
    elements = *sum;
  }
  const Shape flat_shape = Shape::FromProto(flat);
  if (flat_shape.rank() != 1 || flat_shape.dimension(0) != elements) {
    return invalid(absl::StrCat("the flat tensor is ", flat_shape.ToString(), ", not [", elements,
                                "] (the parts' elements)"));
  }
  return std::make_unique<FlatPackKernel>(pack, shards, init.stream);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreatePackFlatKernel(const KernelInit& init) {
  return CreateFlatPack(init, /*pack=*/true, /*sharded=*/false);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateUnpackFlatKernel(const KernelInit& init) {
  return CreateFlatPack(init, /*pack=*/false, /*sharded=*/false);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreatePackShardsKernel(const KernelInit& init) {
  return CreateFlatPack(init, /*pack=*/true, /*sharded=*/true);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateUnpackShardsKernel(const KernelInit& init) {
  return CreateFlatPack(init, /*pack=*/false, /*sharded=*/true);
}

}  // namespace loom
