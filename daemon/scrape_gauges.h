#ifndef LOOM_DAEMON_SCRAPE_GAUGES_H_
#define LOOM_DAEMON_SCRAPE_GAUGES_H_

// ScrapeGauges: Prometheus gauges whose values are read at scrape time from functions that ask the
// component owning the truth (on the coordinator the nodes and the jobs by state and the job
// history's bytes; on a worker whether it is connected to its coordinator). The Daemon fills it
// and the MetricsServer collects it next to DaemonMetrics' registry.

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/labels.h"
#include "prometheus/metric_family.h"

namespace loom::daemon {

// Gauges whose values are read when Prometheus scrapes (the cluster's nodes by state, the jobs by
// state), from functions that ask the component that owns the truth, so the values cannot drift.
// Register it with the metrics server next to DaemonMetrics' registry.
class ScrapeGauges final : public prometheus::Collectable {
 public:
  using Sample = std::pair<prometheus::Labels, double>;

  // `read` runs on a scrape thread of the metrics server; it must be thread-safe and quick, and
  // what it reads must outlive this object's registration.
  void Add(std::string name, std::string help, std::function<std::vector<Sample>()> read);

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  struct Gauge {
    std::string name;
    std::string help;
    std::function<std::vector<Sample>()> read;
  };
  std::vector<Gauge> gauges_;  // set before registration, read-only after
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_SCRAPE_GAUGES_H_
