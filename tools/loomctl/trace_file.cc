#include "tools/loomctl/trace_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/status/statusor.h"
#include "cli/arguments.h"
#include "tools/loomctl/cluster_connection.h"

namespace loom::loomctl {

int WriteTraceFile(const char* command, ClusterClient& client, const std::string& job_id,
                   const std::string& path, std::ostream& error) {
  absl::StatusOr<v1::GetTraceResponse> trace = client.GetTrace(job_id);
  if (!trace.ok()) return ReportRpcError(command, trace.status(), error);
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file << trace->chrome_trace_json();
  file.close();
  if (!file) {
    error << command << ": cannot write the trace to '" << path << "': " << std::strerror(errno)
          << "\n";
    return cli::kExitFailure;
  }
  error << "trace: " << path << " (" << trace->acts()
        << " acts; open it in https://ui.perfetto.dev)\n";
  return cli::kExitSuccess;
}

}  // namespace loom::loomctl
