#include "server/metrics.h"

namespace kiln::server {
namespace {

prometheus::Histogram::BucketBoundaries TrialBuckets() {
  return {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60};
}
prometheus::Histogram::BucketBoundaries RpcBuckets() {
  return {0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30};
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      trials_(prometheus::BuildCounter()
                  .Name("kiln_trials_total")
                  .Help("Trials finished, by chip type and measurement status")
                  .Register(*registry_)),
      trial_duration_(prometheus::BuildHistogram()
                          .Name("kiln_trial_duration_seconds")
                          .Help("Compile + verify + measure time of a trial, as reported")
                          .Register(*registry_)),
      queue_depth_(prometheus::BuildGauge()
                       .Name("kiln_queue_depth")
                       .Help("Trials waiting for a worker, by chip type (label prefix of the job)")
                       .Register(*registry_)),
      workers_(prometheus::BuildGauge()
                   .Name("kiln_workers")
                   .Help("Registered workers by chip type and state (alive, lost)")
                   .Register(*registry_)),
      jobs_(prometheus::BuildGauge().Name("kiln_jobs").Help("Jobs by state").Register(*registry_)),
      best_tps_(prometheus::BuildGauge()
                    .Name("kiln_job_best_tokens_per_second")
                    .Help("Best estimated tokens/s of a model job")
                    .Register(*registry_)),
      rpcs_(prometheus::BuildCounter()
                .Name("kiln_rpc_requests_total")
                .Help("RPCs handled, by method and status code")
                .Register(*registry_)),
      rpc_duration_(prometheus::BuildHistogram()
                        .Name("kiln_rpc_duration_seconds")
                        .Help("RPC handling time by method")
                        .Register(*registry_)) {}

void CoordinatorMetrics::TrialFinished(const std::string& chip_type, const std::string& status,
                                       double seconds) {
  trials_.Add({{"chip_type", chip_type}, {"status", status}}).Increment();
  trial_duration_.Add({{"chip_type", chip_type}}, TrialBuckets()).Observe(seconds);
}

void CoordinatorMetrics::SetQueueDepth(const std::string& chip_type, double n) {
  queue_depth_.Add({{"chip_type", chip_type}}).Set(n);
}

void CoordinatorMetrics::SetWorkers(const std::string& chip_type, const std::string& state,
                                    double n) {
  workers_.Add({{"chip_type", chip_type}, {"state", state}}).Set(n);
}

void CoordinatorMetrics::SetJobs(const std::string& state, double n) {
  jobs_.Add({{"state", state}}).Set(n);
}

void CoordinatorMetrics::SetBestTokensPerSecond(const std::string& job_id, double v) {
  best_tps_.Add({{"job", job_id}}).Set(v);
}

void CoordinatorMetrics::RpcFinished(const std::string& method, const std::string& code,
                                     double seconds) {
  rpcs_.Add({{"method", method}, {"code", code}}).Increment();
  rpc_duration_.Add({{"method", method}}, RpcBuckets()).Observe(seconds);
}

}  // namespace kiln::server
