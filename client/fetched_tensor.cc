#include "client/fetched_tensor.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/tensor_bytes.h"

namespace loom {

absl::StatusOr<HostTensor> HostTensorOf(const v1::FetchedTensor& fetched) {
  const int64_t bytes = static_cast<int64_t>(fetched.data().size());
  if (fetched.piece() < 0 || !BytesHoldTensor(fetched.data_type(), fetched.shape(), bytes)) {
    return absl::DataLossError(absl::StrCat("the daemon sent piece ", fetched.piece(),
                                            " of fetched tensor '", fetched.tensor(), "' with ",
                                            bytes, " bytes, not what its data type and shape [",
                                            absl::StrJoin(fetched.shape(), ", "), "] hold"));
  }
  HostTensor tensor;
  tensor.data_type = fetched.data_type();
  // Copied from a named Shape: moving a temporary one trips GCC 12's -Wmaybe-uninitialized inside
  // absl::InlinedVector's move (a false positive).
  const Shape shape(fetched.shape());
  tensor.shape = shape;
  tensor.bytes.resize(fetched.data().size());
  std::memcpy(tensor.bytes.data(), fetched.data().data(), fetched.data().size());
  return tensor;
}

}  // namespace loom
