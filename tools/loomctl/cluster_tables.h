#ifndef LOOM_TOOLS_LOOMCTL_CLUSTER_TABLES_H_
#define LOOM_TOOLS_LOOMCTL_CLUSTER_TABLES_H_

// The human text of `loomctl jobs`, `status` and `nodes`: a table of jobs, one job's status, a
// table of nodes, and the timestamps and memory budgets in them. With --output json those
// commands print the messages instead.

#include <string>
#include <vector>

#include "proto/loom/v1/cluster_service.pb.h"
#include "proto/loom/v1/job_service.pb.h"

namespace loom::loomctl {

// The human text of `loomctl jobs`, `status` and `nodes` (--output json prints the messages).

// JOB  NAME  STATE  SUBMITTED  STEPS  LOSS  DEVICES, one row per job; "no jobs" when empty.
std::string FormatJobTable(const std::vector<v1::JobInfo>& jobs);
// "job:  job-3 (mlp_regression)", state, steps, last loss, devices, times, error: one per line.
std::string FormatJobStatus(const v1::JobInfo& job);
// NAME  INDEX  ADDRESS  STATE  ROLE  DEVICES  MEMORY/DEVICE  JOB  VERSION, one row per node.
std::string FormatNodeTable(const std::vector<v1::NodeInfo>& nodes);

// "2024-05-01 12:00:03" in the local time zone; "-" when unset.
std::string FormatTimestamp(const google::protobuf::Timestamp& time);
// A device's memory budget: "4 GiB" (FormatBytes), "no limit" for 0.
std::string FormatMemoryBudget(int64_t bytes);

}  // namespace loom::loomctl

#endif  // LOOM_TOOLS_LOOMCTL_CLUSTER_TABLES_H_
