// Coordinator metrics (prometheus-cpp): families built once, injected into the core.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

namespace kiln::server {

class CoordinatorMetrics {
 public:
  CoordinatorMetrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void TrialFinished(const std::string& chip_type, const std::string& status, double seconds);
  void SetQueueDepth(const std::string& chip_type, double n);
  void SetWorkers(const std::string& chip_type, const std::string& state, double n);
  void SetJobs(const std::string& state, double n);
  void SetBestTokensPerSecond(const std::string& job_id, double v);
  void RpcFinished(const std::string& method, const std::string& code, double seconds);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& trials_;
  prometheus::Family<prometheus::Histogram>& trial_duration_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& best_tps_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Family<prometheus::Histogram>& rpc_duration_;
};

}  // namespace kiln::server
