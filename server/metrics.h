// Coordinator metrics (prometheus-cpp): families built once, injected into the core, the RPC
// interceptor and the metered store. The catalogue is docs/metrics.md.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "agent/agent_metrics.h"
#include "kiln/v1/types.pb.h"

namespace kiln::server {

class CoordinatorMetrics {
 public:
  // Series of a job that finished longer ago than this are dropped.
  static constexpr int64_t kJobSeriesRetentionMs = 3600 * 1000;

  CoordinatorMetrics();
  ~CoordinatorMetrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Trials and fleet (the core).
  void TrialFinished(const std::string& chip_type, const v1::Measurement& m);
  void SetQueueDepth(const std::string& chip_type, double n);
  void SetWorkers(const std::string& chip_type, const std::string& state, double n);
  void SetJobs(const std::string& state, double n);
  void WorkerRegistered(const std::string& chip_type, const std::string& worker);

  // The agent: every strategy's proposals (n configurations from one Propose call that began at
  // `start`), and the sink through which learning strategies report loss, entropy, reward and
  // rank accuracy as gauges labelled with `job_id` ("" for the process-wide default sink).
  void Proposed(const std::string& strategy, int n, std::chrono::steady_clock::time_point start);
  std::shared_ptr<agent::AgentMetrics> AgentSink(const std::string& job_id);

  // Per job: progress, budget and best-so-far per task (called with every gauge update).
  void SetJob(const v1::Job& job, int64_t now_ms);
  // The job's series leave the exposition (the job left the coordinator's memory).
  void DropJob(const std::string& job_id);
  void SetBestTokensPerSecond(const std::string& job_id, double v);
  // A model job's measured step over its memory-bandwidth bound (read next to the step), 0..1+.
  void SetBoundFraction(const std::string& job_id, double v);

  // RPCs (server/rpc_interceptor.h) and store operations (server/store/metered_store.h).
  void RpcFinished(const std::string& method, const std::string& code, double seconds);
  void StoreOperation(const std::string& op, bool ok, double seconds);
  // A request refused for its credentials or for what it claims (kiln_rpc_refused_total):
  // reason "no_token", "unknown_token", "no_client_certificate", "wrong_role", "not_owner", ...
  void Refused(const std::string& reason);
  // A parked LeaseTrials woken by new work (kiln_lease_wakeups_total): it took trials, or found
  // none and parked again (a herd, when that is most of them).
  void LeaseWoken(bool took_trials);

 private:
  struct JobSeries;
  JobSeries& SeriesLocked(const std::string& job_id);
  void DropLocked(JobSeries& s);

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& trials_;
  prometheus::Family<prometheus::Histogram>& trial_duration_;
  prometheus::Family<prometheus::Histogram>& trial_phase_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Family<prometheus::Counter>& registrations_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Counter>& proposals_;
  prometheus::Family<prometheus::Histogram>& propose_seconds_;
  prometheus::Family<prometheus::Gauge>& policy_loss_;
  prometheus::Family<prometheus::Gauge>& policy_entropy_;
  prometheus::Family<prometheus::Gauge>& policy_reward_;
  prometheus::Family<prometheus::Gauge>& rank_accuracy_;
  prometheus::Family<prometheus::Gauge>& prior_weight_;
  prometheus::Family<prometheus::Gauge>& job_trials_done_;
  prometheus::Family<prometheus::Gauge>& job_trials_failed_;
  prometheus::Family<prometheus::Gauge>& job_budget_;
  prometheus::Family<prometheus::Gauge>& job_budget_used_;
  prometheus::Family<prometheus::Gauge>& job_best_us_;
  prometheus::Family<prometheus::Gauge>& job_best_gflops_;
  prometheus::Family<prometheus::Gauge>& job_speedup_;
  prometheus::Family<prometheus::Gauge>& best_tps_;
  prometheus::Family<prometheus::Gauge>& bound_fraction_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Family<prometheus::Histogram>& rpc_duration_;
  prometheus::Family<prometheus::Counter>& store_ops_;
  prometheus::Family<prometheus::Histogram>& store_seconds_;
  prometheus::Family<prometheus::Counter>& refused_;
  prometheus::Family<prometheus::Counter>& lease_wakeups_;

  std::mutex mu_;  // guards jobs_series_
  std::map<std::string, std::unique_ptr<JobSeries>> job_series_;
};

}  // namespace kiln::server
