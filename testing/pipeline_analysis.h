#ifndef LOOM_TESTING_PIPELINE_ANALYSIS_H_
#define LOOM_TESTING_PIPELINE_ANALYSIS_H_

// Pipeline schedules read from a job's event record, for tests and benchmarks: AnalyzePipeline
// gives each stage's micro-batches in flight, order of forward and backward passes and busy time,
// from the ActEvents and each task's PipelineRole; OneForwardOneBackwardOrder gives the order a
// one-forward-one-backward schedule has. Used by the compiler's pipeline tests and bench/bubble.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "proto/job.pb.h"
#include "proto/plan.pb.h"
#include "runtime/event_record.h"

namespace loom {

// What a task is to a pipeline: the stage it computes for (-1: none, e.g. variables and
// per-step tasks), whether it is part of the backward pass, and whether of its deferred weight
// gradients (zero-bubble schedules' "W"). An interleaved pipeline's device runs several stages:
// `round` tells them apart (0 .. v - 1), and a micro-batch of each is held apart.
struct PipelineRole {
  int stage = -1;
  bool backward = false;
  bool weight_gradient = false;
  int round = 0;
};

// One stage's schedule, read from the runtime's event record (pieces are micro-batches).
struct StageSchedule {
  // Micro-batch j's activations are held on the stage from the start of its first forward act
  // there to the end of its last backward act there; the most micro-batches held at once (of an
  // interleaved device, of all its rounds together).
  int64_t peak_in_flight = 0;
  // The stage's passes in the order they began: "F" for a micro-batch's first forward act,
  // "B" for its first backward act, e.g. "FFFBFBFBBB", and with deferred weight gradients "W"
  // for its first act of those.
  std::string order;
  // The union of the stage's act intervals; its first act's start and its last act's end
  // (nanoseconds since the job started).
  int64_t busy_nanoseconds = 0;
  int64_t first_start_nanoseconds = 0;
  int64_t last_end_nanoseconds = 0;
};

// Per stage 0..num_stages-1. `roles` is indexed by task index (events' task_index).
std::vector<StageSchedule> AnalyzePipeline(const std::vector<ActEvent>& events,
                                           const std::vector<PipelineRole>& roles, int num_stages);

// The roles of a plan's tasks (indexed by task index) when pipeline stage s runs on the devices
// of index s: every COMPUTE task that acts on every micro-batch is a pass of its device's stage
// (what acts once a step is none), backward when the compiler gave
// it a priority other than forward's 0 (1; under a zero-bubble schedule -1 for input gradients
// and -2 for weight gradients), a deferred weight gradient when below -1. Schedules whose
// devices run several stages, one per round c (Task.priority says which): INTERLEAVED with
// `virtual_stages` v, v + c forward and c - v backward; ZERO_BUBBLE_V, 2 + c forward, -1 - c input
// gradients, -3 - c weight gradients. Their other tasks have no stage.
std::vector<PipelineRole> PipelineRolesByDevice(const plan::Plan& plan,
                                                job::PipelineSchedule schedule = job::ONE_F_ONE_B,
                                                int virtual_stages = 1);

// The most held at once, given each change of what is held: +1 when a thing is taken in, -1 when
// it is let go, at a time (nanoseconds); at equal times, releases count first.
int64_t PeakHeld(std::vector<std::pair<int64_t, int>> changes);

// A step's span: from the first act of any stage to the end of the last act of any stage.
int64_t SpanNanoseconds(const std::vector<StageSchedule>& stages);

// The idle fraction of a step: over its span, the mean over stages of 1 - busy / span.
double IdleFraction(const std::vector<StageSchedule>& stages);

// One-forward-one-backward's order of a stage that may hold `in_flight` micro-batches, for `m`
// micro-batches: min(in_flight, m) forwards, then alternating backward and forward while forwards
// remain, then the remaining backwards.
std::string OneForwardOneBackwardOrder(int64_t in_flight, int64_t m);

}  // namespace loom

#endif  // LOOM_TESTING_PIPELINE_ANALYSIS_H_
