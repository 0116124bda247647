#include "workers/worker_metrics.h"

#include "absl/strings/str_cat.h"
#include "common/daemon.h"
#include "common/status.h"

namespace kiln::workers {

WorkerMetrics::WorkerMetrics(const std::string& chip_type)
    : registry_(std::make_shared<prometheus::Registry>()),
      chip_type_(chip_type),
      trials_(prometheus::BuildCounter()
                  .Name("kiln_worker_trials_total")
                  .Help("Trials this worker ran, by chip type and measurement status")
                  .Register(*registry_)),
      phase_(prometheus::BuildHistogram()
                 .Name("kiln_worker_trial_phase_seconds")
                 .Help("Time per trial phase (compile, measure) on this worker")
                 .Register(*registry_)),
      connected_(prometheus::BuildGauge()
                     .Name("kiln_worker_connected")
                     .Help("1 while the worker is registered with its coordinator")
                     .Register(*registry_)
                     .Add({{"chip_type", chip_type}})),
      busy_(prometheus::BuildGauge()
                .Name("kiln_worker_busy")
                .Help("1 while a trial runs")
                .Register(*registry_)
                .Add({{"chip_type", chip_type}})),
      processes_(prometheus::BuildCounter()
                     .Name("kiln_worker_trial_processes_started_total")
                     .Help("Long-lived trial processes started: when work arrives after an idle "
                           "spell, and after a tuning trial that crashed, hung or was wrong")
                     .Register(*registry_)
                     .Add({{"chip_type", chip_type}})) {}

absl::Status WorkerMetrics::Serve(const std::string& listen) {
  if (listen.empty()) return absl::OkStatus();
  auto endpoint = MetricsEndpoint::Start(listen, registry_);
  if (!endpoint.ok()) return endpoint.status();
  endpoint_ = std::move(*endpoint);
  return absl::OkStatus();
}

void WorkerMetrics::TrialFinished(const std::string& status, double compile_s, double measure_s) {
  trials_.Add({{"chip_type", chip_type_}, {"status", status}}).Increment();
  static const prometheus::Histogram::BucketBoundaries kBuckets = {0.01, 0.05, 0.1, 0.25, 0.5,
                                                                   1,    2,    5,   10,   30};
  if (compile_s > 0)
    phase_.Add({{"chip_type", chip_type_}, {"phase", "compile"}}, kBuckets).Observe(compile_s);
  phase_.Add({{"chip_type", chip_type_}, {"phase", "measure"}}, kBuckets).Observe(measure_s);
}

}  // namespace kiln::workers
