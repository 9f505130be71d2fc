#ifndef LOOM_TOOLS_LOOMCTL_TRACE_FILE_H_
#define LOOM_TOOLS_LOOMCTL_TRACE_FILE_H_

// WriteTraceFile: an ended job's Chrome trace fetched from the coordinator in parts (GetTrace) and
// written to a file, for `loomctl submit --trace` and `loomctl trace`. It returns loomctl's exit
// code.

#include <ostream>
#include <string>

#include "client/cluster_client.h"

namespace loom::loomctl {

// Fetches the Chrome trace of an ended job submitted with trace (GetTrace, in parts) and writes it
// to `path`, saying "trace: PATH (N acts; open it in https://ui.perfetto.dev)" on `error`, for
// `loomctl submit --trace` and `loomctl trace`. Returns kExitSuccess, or after saying why on
// `error`: the failed call's exit code (ExitCodeOfRpcError), or kExitFailure when the file could
// not be written.
int WriteTraceFile(const char* command, ClusterClient& client, const std::string& job_id,
                   const std::string& path, std::ostream& error);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_TRACE_FILE_H_
