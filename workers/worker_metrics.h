// Worker metrics (prometheus-cpp), served on the worker's --metrics-listen.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics_http.h"

namespace kiln::workers {

class WorkerMetrics {
 public:
  explicit WorkerMetrics(const std::string& chip_type);
  // Starts the HTTP endpoint ("" = none).
  absl::Status Serve(const std::string& listen);

  void TrialFinished(const std::string& status, double compile_s, double measure_s);
  void SetConnected(bool up) { connected_.Set(up ? 1 : 0); }
  void SetBusy(bool busy) { busy_.Set(busy ? 1 : 0); }
  void TrialProcessesStarted(int n) { processes_.Increment(n); }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsEndpoint> endpoint_;
  std::string chip_type_;
  prometheus::Family<prometheus::Counter>& trials_;
  prometheus::Family<prometheus::Histogram>& phase_;
  prometheus::Gauge& connected_;
  prometheus::Gauge& busy_;
  prometheus::Counter& processes_;
};

}  // namespace kiln::workers
