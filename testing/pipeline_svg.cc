#include "testing/pipeline_svg.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace loom {
namespace {

constexpr double kLeft = 70;  // the stage labels
constexpr double kTop = 30;   // the title
constexpr double kRowHeight = 28;
constexpr double kRowGap = 6;
constexpr double kPixelsPerMillisecond = 12;

// Odd rounds of an interleaved pipeline in darker shades.
const char* ColourOf(const PipelineRole& role) {
  const bool odd = role.round % 2 == 1;
  if (role.weight_gradient) return "#f0a830";             // W
  if (role.backward) return odd ? "#2e7d32" : "#4caf50";  // B (or the whole backward)
  return odd ? "#1f4e9c" : "#4a7bd0";                     // F
}

std::string Escaped(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    switch (c) {
      case '<':
        escaped += "&lt;";
        break;
      case '>':
        escaped += "&gt;";
        break;
      case '&':
        escaped += "&amp;";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

}  // namespace

std::string PipelineSvg(const std::vector<ActEvent>& events, const std::vector<PipelineRole>& roles,
                        int num_stages, const std::string& title, double min_microseconds) {
  int64_t begin = std::numeric_limits<int64_t>::max();
  int64_t end = std::numeric_limits<int64_t>::min();
  std::vector<const ActEvent*> shown;
  for (const ActEvent& event : events) {
    if (event.task_index >= roles.size()) continue;
    const PipelineRole& role = roles[event.task_index];
    if (role.stage < 0 || role.stage >= num_stages) continue;
    if (static_cast<double>(event.end_nanoseconds - event.start_nanoseconds) <
        min_microseconds * 1000) {
      continue;
    }
    shown.push_back(&event);
    begin = std::min(begin, event.start_nanoseconds);
    end = std::max(end, event.end_nanoseconds);
  }
  if (shown.empty()) begin = end = 0;
  const double span_milliseconds = static_cast<double>(end - begin) / 1e6;
  const double width = kLeft + span_milliseconds * kPixelsPerMillisecond + 20;
  const double height = kTop + num_stages * (kRowHeight + kRowGap) + 30;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%.0f\" y=\"18\" font-size=\"13\">%s</text>\n",
      width, height, kLeft, Escaped(title));
  for (int stage = 0; stage < num_stages; ++stage) {
    const double y = kTop + stage * (kRowHeight + kRowGap);
    absl::StrAppendFormat(&svg, "<text x=\"8\" y=\"%.0f\">device %d</text>\n", y + 18, stage);
  }
  for (const ActEvent* event : shown) {
    const PipelineRole& role = roles[event->task_index];
    const double x =
        kLeft + static_cast<double>(event->start_nanoseconds - begin) / 1e6 * kPixelsPerMillisecond;
    const double w =
        std::max(1.0, static_cast<double>(event->end_nanoseconds - event->start_nanoseconds) / 1e6 *
                          kPixelsPerMillisecond);
    const double y = kTop + role.stage * (kRowHeight + kRowGap);
    absl::StrAppendFormat(&svg,
                          "<rect x=\"%.1f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\" fill=\"%s\" "
                          "stroke=\"white\" stroke-width=\"0.5\"/>\n",
                          x, y, w, kRowHeight, ColourOf(role));
    if (w >= 12) {
      absl::StrAppendFormat(&svg,
                            "<text x=\"%.1f\" y=\"%.0f\" fill=\"white\" text-anchor=\"middle\">"
                            "%d</text>\n",
                            x + w / 2, y + 18, event->piece);
    }
  }
  const double axis = kTop + num_stages * (kRowHeight + kRowGap) + 14;
  for (int ms = 0; ms <= static_cast<int>(span_milliseconds); ms += 10) {
    absl::StrAppendFormat(&svg, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">%d ms</text>\n",
                          kLeft + ms * kPixelsPerMillisecond, axis, ms);
  }
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%.0f\" y=\"%.0f\"><tspan fill=\"#4a7bd0\">&#9632; forward</tspan> "
      "<tspan fill=\"#4caf50\">&#9632; backward (input gradient)</tspan> "
      "<tspan fill=\"#f0a830\">&#9632; weight gradient (deferred)</tspan></text>\n",
      kLeft + 220, 18.0);
  svg += "</svg>\n";
  return svg;
}

}  // namespace loom
