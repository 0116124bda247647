#include "server/metrics.h"

#include <algorithm>

namespace kiln::server {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;
using prometheus::Registry;

Family<Counter>& NewCounter(Registry& r, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}
Family<Gauge>& NewGauge(Registry& r, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}
Family<Histogram>& NewHistogram(Registry& r, const char* name, const char* help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r);
}

const Histogram::BucketBoundaries& TrialBuckets() {
  static const Histogram::BucketBoundaries b = {0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60};
  return b;
}
const Histogram::BucketBoundaries& FastBuckets() {  // RPCs, store operations, proposals
  static const Histogram::BucketBoundaries b = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05,
                                                0.1,    0.5,    1,     5,     30};
  return b;
}

bool Terminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics()
    : registry_(std::make_shared<Registry>()),
      trials_(NewCounter(*registry_, "kiln_trials_total",
                         "Trials measured by workers, by chip type and measurement status")),
      trial_duration_(NewHistogram(*registry_, "kiln_trial_duration_seconds",
                                   "Compile + verify + measure seconds of a trial, as reported")),
      trial_phase_(NewHistogram(*registry_, "kiln_trial_phase_seconds",
                                "Seconds per trial phase (compile; measure = verify + time)")),
      queue_depth_(NewGauge(*registry_, "kiln_queue_depth",
                            "Trials still to run for active jobs, by chip type (or job prefix)")),
      workers_(NewGauge(*registry_, "kiln_workers",
                        "Registered workers by chip type and state (alive, lost)")),
      registrations_(NewCounter(*registry_, "kiln_worker_registrations_total",
                                "Worker registrations (first and re-registrations) by worker")),
      jobs_(NewGauge(*registry_, "kiln_jobs", "Jobs by state")),
      proposals_(NewCounter(*registry_, "kiln_agent_proposals_total",
                            "Configurations proposed by the search strategy, by strategy")),
      propose_seconds_(NewHistogram(*registry_, "kiln_agent_propose_seconds",
                                    "Seconds one Propose call of the strategy took")),
      policy_loss_(NewGauge(*registry_, "kiln_policy_loss",
                            "Loss of the last policy update of a learning strategy, by job")),
      policy_entropy_(NewGauge(*registry_, "kiln_policy_entropy",
                               "Entropy of the policy's action distribution, by job")),
      policy_reward_(NewGauge(*registry_, "kiln_policy_reward",
                              "Mean reward of the policy's last update batch, by job")),
      rank_accuracy_(NewGauge(*registry_, "kiln_cost_model_rank_accuracy",
                              "Pairwise rank accuracy of the learned cost model, by job")),
      prior_weight_(NewGauge(*registry_, "kiln_policy_prior_weight",
                             "Weight a warm-started job gives its checkpoint's prior, by job")),
      job_trials_done_(NewGauge(*registry_, "kiln_job_trials_done",
                                "Tuning trials finished for a job (measured or from the store)")),
      job_trials_failed_(
          NewGauge(*registry_, "kiln_job_trials_failed", "Tuning trials of a job that failed")),
      job_budget_(NewGauge(*registry_, "kiln_job_budget_trials", "Trial budget of a job")),
      job_budget_used_(NewGauge(*registry_, "kiln_job_budget_used_ratio",
                                "Share of the job's budget used: max(trials, time), 0..1")),
      job_best_us_(NewGauge(*registry_, "kiln_job_best_median_us",
                            "Best median microseconds so far, by job and task (workload key)")),
      job_best_gflops_(NewGauge(*registry_, "kiln_job_best_gflops",
                                "GFLOP/s of the best configuration so far, by job and task")),
      job_speedup_(NewGauge(*registry_, "kiln_job_speedup_vs_baseline",
                            "Baseline median / best median, by job and task")),
      best_tps_(NewGauge(*registry_, "kiln_job_best_tokens_per_second",
                         "Best estimated tokens/s of a model job")),
      bound_fraction_(NewGauge(*registry_, "kiln_job_bandwidth_bound_fraction",
                               "A model job's measured step over its memory-bandwidth bound, "
                               "the bandwidth read next to the step")),
      rpcs_(NewCounter(*registry_, "kiln_rpc_requests_total",
                       "RPCs handled, by full method name and gRPC status code")),
      rpc_duration_(NewHistogram(*registry_, "kiln_rpc_duration_seconds",
                                 "RPC handling seconds by method (long-polls included)")),
      store_ops_(NewCounter(*registry_, "kiln_store_operations_total",
                            "Store operations by operation and result (ok, error)")),
      store_seconds_(NewHistogram(*registry_, "kiln_store_operation_seconds",
                                  "Store operation seconds by operation")),
      refused_(NewCounter(*registry_, "kiln_rpc_refused_total",
                          "Requests refused for their credentials or claims, by reason")),
      lease_wakeups_(NewCounter(*registry_, "kiln_lease_wakeups_total",
                                "Parked LeaseTrials woken by new work, by outcome (trials, "
                                "nothing: parked again)")) {}

CoordinatorMetrics::~CoordinatorMetrics() = default;

void CoordinatorMetrics::TrialFinished(const std::string& chip_type, const v1::Measurement& m) {
  trials_.Add({{"chip_type", chip_type}, {"status", v1::MeasurementStatus_Name(m.status())}})
      .Increment();
  trial_duration_.Add({{"chip_type", chip_type}}, TrialBuckets())
      .Observe(m.compile_seconds() + m.measure_seconds());
  if (m.compile_seconds() > 0)
    trial_phase_.Add({{"chip_type", chip_type}, {"phase", "compile"}}, TrialBuckets())
        .Observe(m.compile_seconds());
  trial_phase_.Add({{"chip_type", chip_type}, {"phase", "measure"}}, TrialBuckets())
      .Observe(m.measure_seconds());
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

void CoordinatorMetrics::WorkerRegistered(const std::string& chip_type, const std::string& worker) {
  registrations_.Add({{"chip_type", chip_type}, {"worker", worker}}).Increment();
}

void CoordinatorMetrics::Proposed(const std::string& strategy, int n,
                                  std::chrono::steady_clock::time_point start) {
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  proposals_.Add({{"strategy", strategy}}).Increment(std::max(0, n));
  propose_seconds_.Add({{"strategy", strategy}}, FastBuckets()).Observe(seconds);
}

void CoordinatorMetrics::RpcFinished(const std::string& method, const std::string& code,
                                     double seconds) {
  rpcs_.Add({{"method", method}, {"code", code}}).Increment();
  rpc_duration_.Add({{"method", method}}, FastBuckets()).Observe(seconds);
}

void CoordinatorMetrics::Refused(const std::string& reason) {
  refused_.Add({{"reason", reason}}).Increment();
}

void CoordinatorMetrics::LeaseWoken(bool took_trials) {
  lease_wakeups_.Add({{"outcome", took_trials ? "trials" : "nothing"}}).Increment();
}

void CoordinatorMetrics::StoreOperation(const std::string& op, bool ok, double seconds) {
  store_ops_.Add({{"op", op}, {"result", ok ? "ok" : "error"}}).Increment();
  store_seconds_.Add({{"op", op}}, FastBuckets()).Observe(seconds);
}

// ---- Per-job series ----

struct CoordinatorMetrics::JobSeries {
  std::string id;
  Gauge* done = nullptr;
  Gauge* failed = nullptr;
  Gauge* budget = nullptr;
  Gauge* used = nullptr;
  struct Task {
    Gauge* best_us = nullptr;
    Gauge* gflops = nullptr;
    Gauge* speedup = nullptr;
  };
  std::map<std::string, Task> tasks;  // by workload key
  Gauge* tps = nullptr;
  Gauge* bound_fraction = nullptr;
};

CoordinatorMetrics::JobSeries& CoordinatorMetrics::SeriesLocked(const std::string& job_id) {
  auto& s = job_series_[job_id];
  if (!s) {
    s = std::make_unique<JobSeries>();
    s->id = job_id;
  }
  return *s;
}

void CoordinatorMetrics::DropLocked(JobSeries& s) {
  auto drop = [](Family<Gauge>& f, Gauge* g) {
    if (g) f.Remove(g);
  };
  drop(job_trials_done_, s.done);
  drop(job_trials_failed_, s.failed);
  drop(job_budget_, s.budget);
  drop(job_budget_used_, s.used);
  for (const auto& [key, t] : s.tasks) {
    drop(job_best_us_, t.best_us);
    drop(job_best_gflops_, t.gflops);
    drop(job_speedup_, t.speedup);
  }
  drop(best_tps_, s.tps);
  drop(bound_fraction_, s.bound_fraction);
  for (auto* f : {&policy_loss_, &policy_entropy_, &policy_reward_, &rank_accuracy_})
    if (f->Has({{"job_id", s.id}})) f->Remove(&f->Add({{"job_id", s.id}}));
}

void CoordinatorMetrics::DropJob(const std::string& job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = job_series_.find(job_id);
  if (it == job_series_.end()) return;
  DropLocked(*it->second);
  job_series_.erase(it);
}

void CoordinatorMetrics::SetJob(const v1::Job& job, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  bool terminal = Terminal(job.state());
  if (terminal && job.finished_unix_ms() > 0 &&
      now_ms - job.finished_unix_ms() > kJobSeriesRetentionMs) {
    auto it = job_series_.find(job.id());
    if (it != job_series_.end()) {
      DropLocked(*it->second);
      job_series_.erase(it);
    }
    return;
  }
  JobSeries& s = SeriesLocked(job.id());
  const prometheus::Labels id = {{"job_id", job.id()}};
  if (!s.done) {
    s.done = &job_trials_done_.Add(id);
    s.failed = &job_trials_failed_.Add(id);
    s.budget = &job_budget_.Add(id);
    s.used = &job_budget_used_.Add(id);
  }
  double budget = job.spec().budget_trials();
  if (budget <= 0)
    for (const auto& t : job.tasks()) budget += t.trials_budget();
  double used = budget > 0 ? job.trials_done() / budget : 0;
  double limit_s = job.spec().max_seconds();
  if (limit_s > 0 && job.started_unix_ms() > 0) {
    int64_t end = terminal && job.finished_unix_ms() > 0 ? job.finished_unix_ms() : now_ms;
    used = std::max(used, (end - job.started_unix_ms()) / (1000 * limit_s));
  }
  s.done->Set(job.trials_done());
  s.failed->Set(job.trials_failed());
  s.budget->Set(budget);
  s.used->Set(std::min(1.0, used));
  for (const auto& t : job.tasks()) {
    if (!t.has_best() || !(t.best().median_us() > 0)) continue;
    JobSeries::Task& series = s.tasks[t.workload_key()];
    if (!series.best_us) {
      const prometheus::Labels labels = {{"job_id", job.id()}, {"task", t.workload_key()}};
      series.best_us = &job_best_us_.Add(labels);
      series.gflops = &job_best_gflops_.Add(labels);
      series.speedup = &job_speedup_.Add(labels);
    }
    series.best_us->Set(t.best().median_us());
    series.gflops->Set(t.best().gflops());
    double base = t.baseline().status() == v1::OK ? t.baseline().median_us() : 0;
    series.speedup->Set(base > 0 ? base / t.best().median_us() : 0);
  }
}

void CoordinatorMetrics::SetBestTokensPerSecond(const std::string& job_id, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  JobSeries& s = SeriesLocked(job_id);
  if (!s.tps) s.tps = &best_tps_.Add({{"job_id", job_id}});
  s.tps->Set(v);
}

void CoordinatorMetrics::SetBoundFraction(const std::string& job_id, double v) {
  std::lock_guard<std::mutex> lock(mu_);
  JobSeries& s = SeriesLocked(job_id);
  if (!s.bound_fraction) s.bound_fraction = &bound_fraction_.Add({{"job_id", job_id}});
  s.bound_fraction->Set(v);
}

namespace {

// Forwards a strategy's figures to the gauges of its job; holds the registry, so it stays valid
// after the coordinator that made it is gone.
class AgentGauges final : public agent::AgentMetrics {
 public:
  AgentGauges(std::shared_ptr<Registry> registry, std::map<std::string, Family<Gauge>*> families,
              std::string job_id)
      : registry_(std::move(registry)),
        families_(std::move(families)),
        job_id_(std::move(job_id)) {}
  void Report(const std::string& name, double value) override {
    auto it = families_.find(name);
    if (it == families_.end()) return;  // a figure without a gauge in the catalogue
    prometheus::Labels labels;
    if (!job_id_.empty()) labels["job_id"] = job_id_;
    it->second->Add(labels).Set(value);
  }

 private:
  std::shared_ptr<Registry> registry_;
  std::map<std::string, Family<Gauge>*> families_;
  std::string job_id_;
};

}  // namespace

std::shared_ptr<agent::AgentMetrics> CoordinatorMetrics::AgentSink(const std::string& job_id) {
  return std::make_shared<AgentGauges>(
      registry_,
      std::map<std::string, Family<Gauge>*>{{agent::kPolicyLoss, &policy_loss_},
                                            {agent::kPolicyEntropy, &policy_entropy_},
                                            {agent::kPolicyReward, &policy_reward_},
                                            {agent::kCostModelRankAccuracy, &rank_accuracy_},
                                            {agent::kPriorWeight, &prior_weight_}},
      job_id);
}

}  // namespace kiln::server
