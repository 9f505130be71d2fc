#include "daemon/scrape_gauges.h"

namespace loom::daemon {

void ScrapeGauges::Add(std::string name, std::string help,
                       std::function<std::vector<Sample>()> read) {
  gauges_.push_back(Gauge{std::move(name), std::move(help), std::move(read)});
}

std::vector<prometheus::MetricFamily> ScrapeGauges::Collect() const {
  std::vector<prometheus::MetricFamily> families;
  for (const Gauge& gauge : gauges_) {
    prometheus::MetricFamily& family = families.emplace_back();
    family.name = gauge.name;
    family.help = gauge.help;
    family.type = prometheus::MetricType::Gauge;
    for (const auto& [labels, value] : gauge.read()) {
      prometheus::ClientMetric& metric = family.metric.emplace_back();
      for (const auto& [name, label_value] : labels) metric.label.push_back({name, label_value});
      metric.gauge.value = value;
    }
  }
  return families;
}

}  // namespace loom::daemon
