#ifndef LOOM_CLIENT_FETCHED_TENSOR_H_
#define LOOM_CLIENT_FETCHED_TENSOR_H_

// HostTensorOf: the host tensor that a JobEvent.fetched carries, for a job submitted with
// SubmitJobOptions::stream_fetches, checked against its data type and shape. `loomctl`'s fetch
// directory (tools/loomctl/fetch_directory.h) writes what it returns.

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom {

// The tensor of a fetched tensor's event (JobEvent.fetched, from a job submitted with
// SubmitJobOptions::stream_fetches): its data type, shape and bytes, as `loomctl run` fetches
// them locally. DATA_LOSS, naming the tensor and the piece, when the event's bytes are not what
// its data type and shape hold (or its piece is negative).
absl::StatusOr<HostTensor> HostTensorOf(const v1::FetchedTensor& fetched);

}  // namespace loom

#endif  // LOOM_CLIENT_FETCHED_TENSOR_H_
