#ifndef LOOM_TESTING_PIPELINE_SVG_H_
#define LOOM_TESTING_PIPELINE_SVG_H_

// A pipeline's acts drawn as an SVG picture: one row per device (a stage's, or an interleaved
// pipeline's stages'), one box per act of its compute tasks, coloured by pass (forward, input
// gradient, weight gradient; an interleaved pipeline's odd rounds darker) and labelled with its
// micro-batch, on a time axis in milliseconds. For the docs' schedule pictures (bench_schedules
// --svg=DIR).

#include <string>
#include <vector>

#include "runtime/event_record.h"
#include "testing/pipeline_analysis.h"

namespace loom {

// `roles` is indexed by task index (as for AnalyzePipeline); acts of tasks without a stage are
// left out. Acts shorter than `min_microseconds` are left out too (the bookkeeping acts between
// the passes), so that the picture shows the passes.
std::string PipelineSvg(const std::vector<ActEvent>& events, const std::vector<PipelineRole>& roles,
                        int num_stages, const std::string& title, double min_microseconds = 200);

}  // namespace loom

#endif  // LOOM_TESTING_PIPELINE_SVG_H_
