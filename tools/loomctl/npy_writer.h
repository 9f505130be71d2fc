#ifndef LOOM_TOOLS_LOOMCTL_NPY_WRITER_H_
#define LOOM_TOOLS_LOOMCTL_NPY_WRITER_H_

// NumPy .npy files, format version 1.0: the type string of a data type, the header, a tensor's
// whole file (EncodeNpy) and writing it (WriteNpyFile). loomctl writes the fetched tensors it saves
// to --fetch-dir with it.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"

namespace loom::loomctl {

// Writes tensors as NumPy .npy files, format version 1.0
// (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html): the magic string
// "\x93NUMPY", version bytes 1 and 0, a little-endian uint16 header length, then an ASCII Python
// dict literal {'descr': ..., 'fortran_order': False, 'shape': (...), } padded with spaces and
// ended by '\n' so that the data starts at a multiple of 64 bytes, then the row-major data.

// The NumPy type string of a data type: '<f4' (float32), '<i4' (int32), '<i8' (int64), '|u1'
// (uint8), '<u2' (uint16). NumPy has no bfloat16: its raw bits are written as '<u2' (reinterpret
// them, e.g. with ml_dtypes). INVALID_ARGUMENT for DATA_TYPE_UNSPECIFIED.
absl::StatusOr<std::string> NpyTypeString(plan::DataType data_type);

// The magic, version, header length and padded header dict: everything before the data.
absl::StatusOr<std::string> NpyHeader(plan::DataType data_type, const Shape& shape);

// The whole file: header and data. INVALID_ARGUMENT when the tensor's byte count does not match
// its shape and data type.
absl::StatusOr<std::string> EncodeNpy(const HostTensor& tensor);

// Writes EncodeNpy(tensor) to `path`; errors name the path.
absl::Status WriteNpyFile(const HostTensor& tensor, const std::string& path);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_NPY_WRITER_H_
