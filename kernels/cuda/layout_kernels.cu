#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "device/cuda/cuda_status.h"
#include "kernels/attributes.h"
#include "kernels/copy_plan.h"
#include "kernels/cpu/kernel_checks.h"
#include "kernels/cpu/layout_kernels.h"
#include "kernels/cuda/cuda_kernel_util.h"
#include "kernels/cuda/layout_kernels.h"
#include "kernels/kernel_table.h"

namespace loom::cuda {
namespace {

constexpr char kTranspose[] = "transpose";
constexpr char kSlice[] = "slice";
constexpr char kPad[] = "pad";
constexpr char kConcat[] = "concat";

constexpr int kThreads = 256;
// Axes of a copy after size-1 axes are dropped and contiguous ones merged.
constexpr int kMaxRank = 12;
// Square tiles of the transposing copy, loaded and stored by kTileThreadsY rows of 32 threads.
constexpr int kTile = 32;
constexpr int kTileThreadsY = 8;

// A box as a kernel argument: the copy's axes (in units of the copied type), outermost first.
struct Box {
  int rank = 0;
  int64_t dimensions[kMaxRank];
  int64_t source_strides[kMaxRank];
  int64_t destination_strides[kMaxRank];
};

// Copies `count` units of the box, one per thread in a grid-stride loop; Index is 32 bits when
// every offset fits (divisions are much cheaper), else 64.
template <typename Unit, typename Index>
__global__ void CopyBoxKernel(const Unit* __restrict__ source, Unit* __restrict__ destination,
                              Box box, Index count) {
  const Index step = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index index = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; index < count;
       index += step) {
    Index rest = index;
    Index from = 0;
    Index to = 0;
    for (int axis = box.rank - 1; axis >= 0; --axis) {
      const Index dimension = static_cast<Index>(box.dimensions[axis]);
      const Index coordinate = rest % dimension;
      rest /= dimension;
      from += coordinate * static_cast<Index>(box.source_strides[axis]);
      to += coordinate * static_cast<Index>(box.destination_strides[axis]);
    }
    destination[to] = source[from];
  }
}

// The tiled copy of a plan whose last two axes are `rows` (stride 1 in the source) and `columns`:
// each tile is loaded along rows and stored along columns. `outer` holds the other axes.
template <typename Unit>
__global__ void CopyTilesKernel(const Unit* __restrict__ source, Unit* __restrict__ destination,
                                Box outer, int64_t rows, int64_t columns,
                                int64_t row_destination_stride, int64_t column_source_stride,
                                int64_t column_destination_stride, int64_t row_tiles,
                                int64_t column_tiles, int64_t tiles) {
  __shared__ Unit tile[kTile][kTile + 1];
  for (int64_t index = blockIdx.x; index < tiles; index += gridDim.x) {
    const int64_t column_tile = index % column_tiles;
    const int64_t row_tile = (index / column_tiles) % row_tiles;
    int64_t rest = index / column_tiles / row_tiles;
    int64_t from = 0;
    int64_t to = 0;
    for (int axis = outer.rank - 1; axis >= 0; --axis) {
      const int64_t coordinate = rest % outer.dimensions[axis];
      rest /= outer.dimensions[axis];
      from += coordinate * outer.source_strides[axis];
      to += coordinate * outer.destination_strides[axis];
    }
    const int64_t first_row = row_tile * kTile;
    const int64_t first_column = column_tile * kTile;
    // Consecutive threads read consecutive rows: contiguous in the source.
    const int64_t row = first_row + threadIdx.x;
    for (int j = threadIdx.y; j < kTile; j += kTileThreadsY) {
      const int64_t column = first_column + j;
      if (row < rows && column < columns) {
        tile[j][threadIdx.x] = source[from + row + column * column_source_stride];
      }
    }
    __syncthreads();
    // Consecutive threads write consecutive columns: contiguous in the destination.
    const int64_t column = first_column + threadIdx.x;
    for (int j = threadIdx.y; j < kTile; j += kTileThreadsY) {
      const int64_t store_row = first_row + j;
      if (store_row < rows && column < columns) {
        destination[to + store_row * row_destination_stride + column * column_destination_stride] =
            tile[threadIdx.x][j];
      }
    }
    __syncthreads();
  }
}

// Unsigned types of each width the copies move.
template <int kBytes>
struct UnitOf;
template <>
struct UnitOf<1> {
  using Type = uint8_t;
};
template <>
struct UnitOf<2> {
  using Type = uint16_t;
};
template <>
struct UnitOf<4> {
  using Type = uint32_t;
};
template <>
struct UnitOf<8> {
  using Type = unsigned long long;
};
template <>
struct UnitOf<16> {
  using Type = uint4;
};

// The largest sum of coordinate * stride over a box (what an offset can reach).
int64_t LargestOffset(const Box& box, bool source) {
  int64_t largest = 0;
  for (int axis = 0; axis < box.rank; ++axis) {
    largest += (box.dimensions[axis] - 1) *
               (source ? box.source_strides[axis] : box.destination_strides[axis]);
  }
  return largest;
}

template <int kBytes>
void LaunchBox(const std::byte* source, std::byte* destination, const Box& box, int64_t count,
               cudaStream_t stream) {
  using Unit = typename UnitOf<kBytes>::Type;
  const auto* from = reinterpret_cast<const Unit*>(source);
  auto* to = reinterpret_cast<Unit*>(destination);
  constexpr int64_t kNarrow = std::numeric_limits<int32_t>::max();
  const int blocks = static_cast<int>(BlocksFor(count, kThreads));
  if (count <= kNarrow && LargestOffset(box, true) <= kNarrow &&
      LargestOffset(box, false) <= kNarrow) {
    CopyBoxKernel<Unit, uint32_t>
        <<<blocks, kThreads, 0, stream>>>(from, to, box, static_cast<uint32_t>(count));
  } else {
    CopyBoxKernel<Unit, int64_t><<<blocks, kThreads, 0, stream>>>(from, to, box, count);
  }
}

template <int kBytes>
void LaunchTiles(const std::byte* source, std::byte* destination, const CopyPlan& plan,
                 cudaStream_t stream) {
  using Unit = typename UnitOf<kBytes>::Type;
  const int rank = plan.rank();
  Box outer;
  outer.rank = rank - 2;
  int64_t outer_count = 1;
  for (int axis = 0; axis < rank - 2; ++axis) {
    outer.dimensions[axis] = plan.dimensions[axis];
    outer.source_strides[axis] = plan.source_strides[axis];
    outer.destination_strides[axis] = plan.destination_strides[axis];
    outer_count *= plan.dimensions[axis];
  }
  const int64_t rows = plan.dimensions[rank - 2];
  const int64_t columns = plan.dimensions[rank - 1];
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t column_tiles = (columns + kTile - 1) / kTile;
  const int64_t tiles = outer_count * row_tiles * column_tiles;
  const dim3 threads(kTile, kTileThreadsY);
  CopyTilesKernel<Unit><<<static_cast<int>(BlocksFor(tiles, 1)), threads, 0, stream>>>(
      reinterpret_cast<const Unit*>(source), reinterpret_cast<Unit*>(destination), outer, rows,
      columns, plan.destination_strides[rank - 2], plan.source_strides[rank - 1],
      plan.destination_strides[rank - 1], row_tiles, column_tiles, tiles);
}

// Enqueues the copy of `plan` (elements of `element_size` bytes) from `source` to `destination`
// (the tensors' starts; the plan's offsets are added here).
absl::Status EnqueueCopy(const CopyPlan& plan, int64_t element_size, const void* source_tensor,
                         void* destination_tensor, cudaStream_t stream, const std::string& what) {
  if (plan.count == 0) return absl::OkStatus();
  const std::byte* source =
      static_cast<const std::byte*>(source_tensor) + plan.source_offset * element_size;
  std::byte* destination =
      static_cast<std::byte*>(destination_tensor) + plan.destination_offset * element_size;
  const int rank = plan.rank();
  if (rank == 1 && plan.source_strides[0] == 1 && plan.destination_strides[0] == 1) {
    return CudaStatus(cudaMemcpyAsync(destination, source, plan.count * element_size,
                                      cudaMemcpyDeviceToDevice, stream),
                      what);
  }
  if (plan.tiled) {
    switch (element_size) {
      case 1:
        LaunchTiles<1>(source, destination, plan, stream);
        break;
      case 2:
        LaunchTiles<2>(source, destination, plan, stream);
        break;
      case 4:
        LaunchTiles<4>(source, destination, plan, stream);
        break;
      default:
        LaunchTiles<8>(source, destination, plan, stream);
        break;
    }
    return LaunchStatus(what);
  }
  // Contiguous innermost runs in both layouts are moved in the widest units (up to 16 bytes) that
  // divide the runs, every other stride and both addresses.
  int64_t unit = element_size;
  if (plan.source_strides[rank - 1] == 1 && plan.destination_strides[rank - 1] == 1) {
    for (int64_t wide = 16; wide > element_size; wide /= 2) {
      bool fits = plan.dimensions[rank - 1] * element_size % wide == 0 &&
                  reinterpret_cast<uintptr_t>(source) % wide == 0 &&
                  reinterpret_cast<uintptr_t>(destination) % wide == 0;
      for (int axis = 0; fits && axis < rank - 1; ++axis) {
        fits = plan.source_strides[axis] * element_size % wide == 0 &&
               plan.destination_strides[axis] * element_size % wide == 0;
      }
      if (fits) {
        unit = wide;
        break;
      }
    }
  }
  const int64_t scale = unit / element_size;
  Box box;
  box.rank = rank;
  for (int axis = 0; axis < rank; ++axis) {
    const bool innermost = axis == rank - 1 && scale > 1;
    box.dimensions[axis] = innermost ? plan.dimensions[axis] / scale : plan.dimensions[axis];
    box.source_strides[axis] = innermost ? 1 : plan.source_strides[axis] / scale;
    box.destination_strides[axis] = innermost ? 1 : plan.destination_strides[axis] / scale;
  }
  const int64_t count = plan.count / scale;
  switch (unit) {
    case 1:
      LaunchBox<1>(source, destination, box, count, stream);
      break;
    case 2:
      LaunchBox<2>(source, destination, box, count, stream);
      break;
    case 4:
      LaunchBox<4>(source, destination, box, count, stream);
      break;
    case 8:
      LaunchBox<8>(source, destination, box, count, stream);
      break;
    default:
      LaunchBox<16>(source, destination, box, count, stream);
      break;
  }
  return LaunchStatus(what);
}

// One or more box copies (one per input for concat, else one from input 0) into output 0, after
// zeroing the output for pad.
class LayoutKernel final : public Kernel {
 public:
  struct Piece {
    int input = 0;
    CopyPlan plan;
  };

  LayoutKernel(const KernelInit& init, const char* op_type, CudaStreamContext* stream,
               std::vector<Piece> pieces, bool zero_output)
      : task_name_(init.task_name),
        op_type_(op_type),
        signature_(init),
        stream_(stream),
        element_size_(DataTypeSize(init.outputs[0].data_type())),
        pieces_(std::move(pieces)),
        zero_output_(zero_output) {}

  absl::Status Compute(const KernelContext& context) override {
    if (absl::Status status = signature_.Check(op_type_, context); !status.ok()) return status;
    const TensorView& output = context.outputs[0];
    const std::string what = absl::StrCat("task '", task_name_, "': ", op_type_);
    if (zero_output_ && output.ByteSize() > 0) {
      if (absl::Status status = CudaStatus(
              cudaMemsetAsync(output.data, 0, output.ByteSize(), stream_->stream()), what);
          !status.ok()) {
        return status;
      }
    }
    for (const Piece& piece : pieces_) {
      if (absl::Status status =
              EnqueueCopy(piece.plan, element_size_, context.inputs[piece.input].data, output.data,
                          stream_->stream(), what);
          !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }

 private:
  const std::string task_name_;
  const char* const op_type_;
  const cpu::TensorSignature signature_;
  CudaStreamContext* const stream_;
  const int64_t element_size_;
  const std::vector<Piece> pieces_;
  const bool zero_output_;
};

// The kernel once the CPU factory accepted the configuration (so that both reject exactly the
// same plans with the same messages).
absl::StatusOr<std::unique_ptr<Kernel>> MakeLayoutKernel(const KernelInit& init,
                                                         const char* op_type,
                                                         std::vector<LayoutKernel::Piece> pieces,
                                                         bool zero_output) {
  for (const LayoutKernel::Piece& piece : pieces) {
    if (piece.plan.rank() > kMaxRank) {
      return absl::InvalidArgumentError(absl::StrCat(op_type, ": the CUDA kernel copies at most ",
                                                     kMaxRank, " axes that cannot be merged, not ",
                                                     piece.plan.rank()));
    }
  }
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  return std::make_unique<LayoutKernel>(init, op_type, *stream, std::move(pieces), zero_output);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateTransposeKernel(const KernelInit& init) {
  if (absl::StatusOr<std::unique_ptr<Kernel>> checked = cpu::CreateTransposeKernel(init);
      !checked.ok()) {
    return checked.status();
  }
  const Shape input = Shape::FromProto(init.inputs[0]);
  const Shape output = Shape::FromProto(init.outputs[0]);
  absl::StatusOr<std::vector<int64_t>> permutation =
      Attributes(*init.conf).GetIntList("permutation");
  if (!permutation.ok()) return cpu::WithOpType(kTranspose, permutation.status());
  const std::vector<int64_t> input_strides = cpu::RowMajorStrides(input);
  std::vector<int64_t> source_strides(input.rank());
  for (int axis = 0; axis < input.rank(); ++axis) {
    source_strides[axis] = input_strides[(*permutation)[axis]];
  }
  std::vector<LayoutKernel::Piece> pieces;
  pieces.push_back(
      {0, CopyPlan::Make(output.dimensions(), source_strides, cpu::RowMajorStrides(output), 0, 0)});
  return MakeLayoutKernel(init, kTranspose, std::move(pieces), /*zero_output=*/false);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSliceKernel(const KernelInit& init) {
  if (absl::StatusOr<std::unique_ptr<Kernel>> checked = cpu::CreateSliceKernel(init);
      !checked.ok()) {
    return checked.status();
  }
  const Shape input = Shape::FromProto(init.inputs[0]);
  const Shape output = Shape::FromProto(init.outputs[0]);
  absl::StatusOr<std::vector<int64_t>> begin = Attributes(*init.conf).GetIntList("begin");
  if (!begin.ok()) return cpu::WithOpType(kSlice, begin.status());
  const std::vector<int64_t> input_strides = cpu::RowMajorStrides(input);
  int64_t source_offset = 0;
  for (int axis = 0; axis < input.rank(); ++axis) {
    source_offset += (*begin)[axis] * input_strides[axis];
  }
  std::vector<LayoutKernel::Piece> pieces;
  pieces.push_back({0, CopyPlan::Make(output.dimensions(), input_strides,
                                      cpu::RowMajorStrides(output), source_offset, 0)});
  return MakeLayoutKernel(init, kSlice, std::move(pieces), /*zero_output=*/false);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreatePadKernel(const KernelInit& init) {
  if (absl::StatusOr<std::unique_ptr<Kernel>> checked = cpu::CreatePadKernel(init); !checked.ok()) {
    return checked.status();
  }
  const Shape input = Shape::FromProto(init.inputs[0]);
  const Shape output = Shape::FromProto(init.outputs[0]);
  absl::StatusOr<std::vector<int64_t>> begin = Attributes(*init.conf).GetIntList("begin");
  if (!begin.ok()) return cpu::WithOpType(kPad, begin.status());
  const std::vector<int64_t> output_strides = cpu::RowMajorStrides(output);
  int64_t destination_offset = 0;
  for (int axis = 0; axis < input.rank(); ++axis) {
    destination_offset += (*begin)[axis] * output_strides[axis];
  }
  std::vector<LayoutKernel::Piece> pieces;
  pieces.push_back({0, CopyPlan::Make(input.dimensions(), cpu::RowMajorStrides(input),
                                      output_strides, 0, destination_offset)});
  return MakeLayoutKernel(init, kPad, std::move(pieces), /*zero_output=*/true);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateConcatKernel(const KernelInit& init) {
  if (absl::StatusOr<std::unique_ptr<Kernel>> checked = cpu::CreateConcatKernel(init);
      !checked.ok()) {
    return checked.status();
  }
  const Shape output = Shape::FromProto(init.outputs[0]);
  const int rank = output.rank();
  absl::StatusOr<int64_t> axis_attribute = Attributes(*init.conf).GetInt("axis");
  if (!axis_attribute.ok()) return cpu::WithOpType(kConcat, axis_attribute.status());
  const int axis = static_cast<int>(*axis_attribute < 0 ? *axis_attribute + rank : *axis_attribute);
  int64_t outer = 1;
  for (int other = 0; other < axis; ++other) outer *= output.dimension(other);
  int64_t inner = 1;
  for (int other = axis + 1; other < rank; ++other) inner *= output.dimension(other);
  const int64_t output_row = output.dimension(axis) * inner;
  // Input i is a box [outer, its axis * inner] placed at its column of the output's rows.
  std::vector<LayoutKernel::Piece> pieces;
  int64_t column = 0;
  for (size_t index = 0; index < init.inputs.size(); ++index) {
    const int64_t row = init.inputs[index].shape(axis) * inner;
    if (outer * row > 0) {
      const int64_t dimensions[] = {outer, row};
      const int64_t source_strides[] = {row, 1};
      const int64_t destination_strides[] = {output_row, 1};
      pieces.push_back({static_cast<int>(index), CopyPlan::Make(dimensions, source_strides,
                                                                destination_strides, 0, column)});
    }
    column += row;
  }
  return MakeLayoutKernel(init, kConcat, std::move(pieces), /*zero_output=*/false);
}

}  // namespace

absl::Status RegisterCudaLayoutKernels(KernelRegistry* registry) {
  static constexpr KernelTableEntry kEntries[] = {
      {kTranspose, CreateTransposeKernel},
      {kSlice, CreateSliceKernel},
      {kPad, CreatePadKernel},
      {kConcat, CreateConcatKernel},
  };
  return RegisterKernelTable(registry, plan::CUDA, kEntries);
}

}  // namespace loom::cuda
