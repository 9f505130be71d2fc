#include "core/collective_staging.h"

#include "absl/strings/str_cat.h"
#include "core/balanced_split.h"
#include "core/collective_shapes.h"
#include "core/data_type.h"

namespace loom {

absl::StatusOr<std::vector<int64_t>> CollectiveStagingBytes(const plan::CollectiveConf& conf,
                                                            absl::Span<const Shape> input_shapes,
                                                            int rank, plan::DataType data_type) {
  absl::StatusOr<Shape> output = CollectiveOutputShape(conf, input_shapes, rank);
  if (!output.ok()) return output.status();
  const int size = static_cast<int>(input_shapes.size());
  const int64_t element_size = DataTypeSize(data_type);
  std::vector<int64_t> bytes(2 * size, 0);
  const Shape& input = input_shapes[rank];
  switch (conf.kind()) {
    case plan::ALL_REDUCE:
    case plan::REDUCE_SCATTER: {
      // An all-reduce reduces its flattened input, scattered over the ranks in balanced chunks.
      const bool flat = conf.kind() == plan::ALL_REDUCE;
      const Shape shape = flat ? Shape{input.NumElements()} : input;
      const int axis = flat ? 0 : conf.axis();
      auto slice_bytes = [&](int owner) {
        return shape.ElementsBefore(axis) *
               BalancedRange(shape.dimension(axis), size, owner).size() *
               shape.ElementsAfter(axis) * element_size;
      };
      const int64_t own_bytes = slice_bytes(rank);
      for (int source = 1; source < size; ++source) {
        if (source != rank) bytes[source] = own_bytes;
      }
      if (shape.ElementsBefore(axis) != 1) {
        for (int owner = 0; owner < size; ++owner) {
          if (owner != rank) bytes[size + owner] = slice_bytes(owner);
        }
      }
      break;
    }
    case plan::ALL_GATHER:
      if (output->ElementsBefore(conf.axis()) != 1) {
        for (int source = 0; source < size; ++source) {
          if (source != rank) bytes[source] = input_shapes[source].NumElements() * element_size;
        }
      }
      break;
    case plan::ALL_TO_ALL: {
      // The block `source` sends to `destination`: its balanced slice along `axis`.
      auto block_bytes = [&](int source, int destination) {
        const Shape& shape = input_shapes[source];
        return shape.ElementsBefore(conf.axis()) *
               BalancedRange(shape.dimension(conf.axis()), size, destination).size() *
               shape.ElementsAfter(conf.axis()) * element_size;
      };
      if (output->ElementsBefore(conf.concat_axis()) != 1) {
        for (int source = 0; source < size; ++source) {
          if (source != rank) bytes[source] = block_bytes(source, rank);
        }
      }
      if (input.ElementsBefore(conf.axis()) != 1) {
        for (int destination = 0; destination < size; ++destination) {
          if (destination != rank) bytes[size + destination] = block_bytes(rank, destination);
        }
      }
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("collective ", DescribeCollective(conf), " has no kind"));
  }
  return bytes;
}

}  // namespace loom
