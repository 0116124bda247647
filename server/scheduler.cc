// Coordinator core, scheduling half: binding jobs to chips, proposing and leasing trials,
// applying results.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codegen/cpu/op_templates.h"  // SafeDefaultConfig
#include "codegen/kernel_template.h"
#include "common/status.h"
#include "hardware/reference/step_tolerance.h"
#include "server/coordinator.h"
#include "server/planner/task_scheduler.h"
#include "server/validate.h"

namespace kiln::server {
namespace {

// Statuses whose record is final for (workload, chip, config): answered from the store.
bool Reusable(v1::MeasurementStatus s) {
  return s == v1::OK || s == v1::COMPILE_ERROR || s == v1::WRONG_RESULT;
}

// Bounds the proposals answered from the store in one call, so a lease never spins.
constexpr int kMaxCachedPerCall = 256;

// A task's first proposals, measured before its strategy's: for a model task its template's safe
// default (a configuration every template guarantees to compile and verify), then the
// configurations its template expects to do well at this shape on this chip. Those that break a
// pin or a rule of the space are left out, and so are repeats.
std::vector<codegen::Config> StartingConfigs(const JobEntry& job, int task, bool model) {
  const v1::Workload& w = job.job.tasks(task).workload();
  auto space = codegen::SpaceFor(w, job.job.chip());
  if (!space.ok()) return {};
  std::vector<codegen::Config> candidates;
  if (model) candidates.push_back(codegen::SafeDefaultConfig(*space));
  auto tmpl = codegen::FindTemplate(w, job.job.chip().kind());
  if (tmpl.ok()) {
    for (auto& c : (*tmpl)->StartingConfigs(w, codegen::TraitsFromFingerprint(job.job.chip())))
      candidates.push_back(std::move(c));
  }
  std::vector<codegen::Config> out;
  for (const auto& c : candidates) {
    bool ok = !c.empty() && space->IsValid(c) && std::find(out.begin(), out.end(), c) == out.end();
    for (const auto& [knob, value] : job.job.spec().pin()) {
      auto it = c.find(knob);
      ok = ok && it != c.end() && it->second == value;
    }
    if (ok) out.push_back(c);
  }
  return out;
}

// The digest of the kernel `config` renders to for task `task` on the job's chip (empty when the
// task has no template for the chip or the configuration does not render).
std::string KernelDigest(const JobEntry& job, int task, const codegen::Config& config) {
  auto kernel = codegen::RenderFor(job.job.tasks(task).workload(), job.job.chip(), config);
  return kernel.ok() ? kernel->Hash() : "";
}

// The tuning record of `trial`'s configuration measured as `m`, for the store.
v1::TuningRecord RecordOf(const JobEntry& job, const v1::Trial& trial, const v1::Measurement& m,
                          int64_t now_ms) {
  const v1::TaskResult& task = job.job.tasks(trial.task_index());
  v1::TuningRecord r;
  r.set_workload_key(task.workload_key());
  *r.mutable_workload() = task.workload();
  r.set_chip_type(job.job.chip_type());
  *r.mutable_chip() = job.job.chip();
  *r.mutable_config() = trial.config();
  const codegen::Config config = codegen::FromProto(trial.config());
  r.set_config_key(codegen::ConfigKey(config));
  r.set_kernel_digest(KernelDigest(job, trial.task_index(), config));
  *r.mutable_measurement() = m;
  r.set_created_unix_ms(now_ms);
  r.set_job_id(job.job.id());
  return r;
}

// Final rounds: a configuration slower than the fastest by more than this is not a contender
// (host noise moves memory-bound kernels by +-30% between trials, not by 1.5x).
constexpr double kFinalMargin = 1.5;

// The leading configurations of task `task`: each distinct configuration's fastest OK median over
// its TUNE and REMEASURE trials, fastest first, those within kFinalMargin of the first, at most k.
// A demoted configuration counts with its re-measured figure only (its first was the lucky one),
// and one whose re-measurement failed is no contender.
std::vector<v1::Config> Contenders(const JobEntry& job, int task, int k) {
  std::set<std::string> demoted, failed;  // by config key, from the REMEASURE trials
  for (const auto& [id, t] : job.trials) {
    if (t.task_index() != task || t.kind() != v1::REMEASURE || t.state() != v1::DONE) continue;
    const std::string key = codegen::ConfigKey(codegen::FromProto(t.config()));
    if (t.measurement().status() != v1::OK)
      failed.insert(key);
    else if (t.measurement().demoted())
      demoted.insert(key);
  }
  std::map<std::string, std::pair<double, const v1::Config*>> fastest;  // by config key
  for (const auto& [id, t] : job.trials) {
    if (t.task_index() != task || (t.kind() != v1::TUNE && t.kind() != v1::REMEASURE) ||
        t.state() != v1::DONE || t.measurement().status() != v1::OK)
      continue;
    const std::string key = codegen::ConfigKey(codegen::FromProto(t.config()));
    if (failed.count(key) || (t.kind() == v1::TUNE && demoted.count(key))) continue;
    const double us = t.measurement().median_us();
    auto [it, fresh] = fastest.try_emplace(key, us, &t.config());
    if (!fresh && us < it->second.first) it->second = {us, &t.config()};
  }
  std::vector<std::pair<double, const v1::Config*>> order;
  for (const auto& [key, entry] : fastest) order.push_back(entry);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<v1::Config> out;
  for (const auto& [us, config] : order)
    if (static_cast<int>(out.size()) < k && us <= kFinalMargin * order.front().first)
      out.push_back(*config);
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// A new best's re-measurement confirms it when it is at most this much slower than the first
// figure (DESIGN.md §5): a larger gap means the first run was luckier than the configuration is.
// Faster is always a confirmation (timing noise on a host makes runs slower, not faster).
constexpr double kConfirmRatio = 1.03;

// The TUNE trial whose new best `again` (a REMEASURE trial) re-measures: the latest answered one
// of the same task and configuration before it, or null.
const v1::Trial* RemeasuredTrial(const JobEntry& job, const v1::Trial& again) {
  const std::string key = codegen::ConfigKey(codegen::FromProto(again.config()));
  const v1::Trial* first = nullptr;
  for (const auto& [id, t] : job.trials)
    if (t.kind() == v1::TUNE && t.task_index() == again.task_index() && t.state() == v1::DONE &&
        t.seq() < again.seq() && (!first || t.seq() > first->seq()) &&
        codegen::ConfigKey(codegen::FromProto(t.config())) == key)
      first = &t;
  return first;
}

// The composed step's logits must match LibTorch's within the step tolerance of the job's dtype.
// Checked where STEP results are accepted, not on the worker, so that a worker that skips the
// check (or a buggy one) cannot publish a wrong step's tokens/s: a step outside it is refused.
void RefuseInexactStep(v1::DType dtype, v1::Measurement* m) {
  if (m->status() != v1::OK || !m->has_step()) return;
  const double tolerance = hardware::StepTolerance(dtype);
  const double err = m->step().max_error();
  if (err >= 0 && err <= tolerance) return;  // NaN fails too
  m->set_status(v1::WRONG_RESULT);
  m->set_message(absl::StrCat(
      "Kiln's step logits differ from LibTorch's: max_error ", absl::StrFormat("%.3g", err),
      " > tolerance ", absl::StrFormat("%.3g", tolerance), " (",
      dtype == v1::DTYPE_UNSPECIFIED ? "fp32" : absl::AsciiStrToLower(v1::DType_Name(dtype)),
      ", relative to the largest logit)"));
}

// Why an OK measurement's figures cannot be a timing a worker made ("" when they can be). A
// worker holds valid credentials, not trust: what it reports becomes a job's result and the
// store's answer to later jobs, so figures no harness produces (not finite, not positive, a
// median that is not its samples') are refused before anything counts them.
std::string ImplausibleFigures(const v1::Measurement& m, v1::TrialKind kind) {
  if (m.status() != v1::OK) return "";
  auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  auto non_negative = [](double x) { return std::isfinite(x) && x >= 0; };
  auto figure = [](const char* name, double x) { return absl::StrFormat("%s %.3g", name, x); };
  if (!positive(m.median_us())) return figure("median_us", m.median_us()) + " is not a time";
  if (m.samples_us_size() == 0) return "an OK result without samples";
  for (double x : m.samples_us())
    if (!positive(x)) return figure("a sample of", x) + " us is not a time";
  const std::pair<const char*, double> others[] = {{"gflops", m.gflops()},
                                                   {"gbytes_per_s", m.gbytes_per_s()},
                                                   {"max_error", m.max_error()},
                                                   {"p10_us", m.p10_us()},
                                                   {"p90_us", m.p90_us()},
                                                   {"cv", m.cv()},
                                                   {"compile_seconds", m.compile_seconds()},
                                                   {"measure_seconds", m.measure_seconds()},
                                                   {"prepack_us", m.prepack_us()},
                                                   {"trial_seconds", m.trial_seconds()}};
  for (const auto& [name, x] : others)
    if (!non_negative(x)) return figure(name, x) + " is not finite and >= 0";
  for (const auto& route : m.baseline_routes()) {
    if (route.status() != v1::OK) continue;
    if (!positive(route.median_us()))
      return figure("a baseline route's median_us", route.median_us());
    for (double x : route.samples_us())
      if (!positive(x)) return figure("a baseline route's sample of", x) + " us";
  }
  if (kind == v1::STEP) {
    // A step's median is its scaled step time and its samples the raw ones (a few layers), so
    // they are not compared; its own figures must be figures. (Its max_error is judged by
    // RefuseInexactStep: a NaN there is a wrong step, not a forged one.)
    if (!m.has_step() || !positive(m.step().measured()))
      return figure("the step's measured tokens/s", m.step().measured()) + " is not positive";
    const v1::StepResult& st = m.step();
    const std::pair<const char*, double> step[] = {
        {"step.baseline_measured", st.baseline_measured()},
        {"step.step_us", st.step_us()},
        {"step.baseline_step_us", st.baseline_step_us()},
        {"step.read_gbytes_per_s", st.read_gbytes_per_s()},
        {"step.bytes_per_token", st.bytes_per_token()},
        {"step.bound", st.bound()},
        {"step.bound_fraction", st.bound_fraction()},
        {"step.baseline_bound_fraction", st.baseline_bound_fraction()}};
    for (const auto& [name, x] : step)
      if (!non_negative(x)) return figure(name, x) + " is not finite and >= 0";
    for (const auto* samples :
         {&st.samples_us(), &st.baseline_samples_us(), &st.read_gbytes_per_s_samples(),
          &st.baseline_read_gbytes_per_s_samples()})
      for (double x : *samples)
        if (!positive(x)) return figure("a step sample of", x) + " is not positive";
    return "";
  }
  std::vector<double> sorted(m.samples_us().begin(), m.samples_us().end());
  std::sort(sorted.begin(), sorted.end());
  const double median = Median(sorted);
  // 1%: rounding and quantile conventions, never a different figure.
  if (m.median_us() < sorted.front() || m.median_us() > sorted.back() ||
      std::abs(m.median_us() - median) > 0.01 * median)
    return absl::StrFormat(
        "median_us %.3g is not the median of its %d samples (%.3g, in [%.3g, %.3g])", m.median_us(),
        m.samples_us_size(), median, sorted.front(), sorted.back());
  return "";
}

}  // namespace

absl::Status Coordinator::BindLocked(JobEntry& job, const v1::ChipFingerprint& chip) {
  job.job.set_chip_type(chip.chip_type());
  *job.job.mutable_chip() = chip;
  for (size_t i = 0; i < job.tasks.size(); ++i) {
    const v1::Workload& w = job.job.tasks(i).workload();
    ASSIGN_OR_RETURN(codegen::KnobSpace space, codegen::SpaceFor(w, chip));
    for (const auto& [knob, value] : job.job.spec().pin()) {
      if (IsModelJob(job.job.spec()) && !space.FindKnob(knob)) continue;  // another op's knob
      RETURN_IF_ERROR(space.Pin(knob, value));
    }
    if (space.EnumerateValid(1).empty() && space.CartesianSize() < (1u << 22))
      return absl::InvalidArgumentError("no valid configuration is left after the pins");
    agent::StrategyContext ctx;
    ctx.space = std::move(space);
    ctx.workload = w;
    ctx.chip = chip;
    ctx.seed = job.job.spec().seed() + i;
    if (metrics_) ctx.metrics = metrics_->AgentSink(job.job.id());
    ASSIGN_OR_RETURN(job.tasks[i].strategy, agent::NewStrategy(job.job.spec().strategy(), ctx));
  }
  return absl::OkStatus();
}

void Coordinator::UpdateBestTokensLocked(JobEntry& job) {
  if (!IsModelJob(job.job.spec())) return;
  UpdateEstimate(job);
  const double tps = job.job.tokens_per_second().estimated();
  if (metrics_ && tps > 0 && job.job.tokens_per_second().measured() <= 0)
    metrics_->SetBestTokensPerSecond(job.job.id(), tps);
}

v1::Trial& Coordinator::NewTrialLocked(JobEntry& job, int task, v1::TrialKind kind) {
  v1::Trial t;
  char suffix[16];
  std::snprintf(suffix, sizeof(suffix), "-%06lld", static_cast<long long>(job.next_trial_seq));
  t.set_id(job.job.id() + suffix);
  t.set_seq(job.next_trial_seq++);
  t.set_job_id(job.job.id());
  t.set_task_index(task);
  t.set_attempt(1);
  t.set_kind(kind);
  t.set_state(v1::PENDING);
  *t.mutable_workload() = job.job.tasks(task).workload();
  trial_job_[t.id()] = job.job.id();
  return job.trials[t.id()] = std::move(t);
}

bool Coordinator::MayLeaseLocked(const v1::Trial& trial, const v1::WorkerInfo& worker) const {
  const std::string& first_id = trial.exclude_worker_id();
  if (first_id.empty()) return true;
  auto first = workers_.find(first_id);
  const std::string* first_owner = first == workers_.end() ? nullptr : &first->second.info.owner();
  // Who else could confirm the first figure now: another live worker of the chip type, better
  // one registered with another credential than the first's (a credential running several
  // workers could otherwise confirm its own figures).
  bool other = false, other_owner = false;
  for (const auto& [id, w] : workers_) {
    if (id == first_id || w.info.chip().chip_type() != worker.chip().chip_type() ||
        !WorkerAliveLocked(w.info))
      continue;
    other = true;
    other_owner = other_owner || (first_owner && w.info.owner() != *first_owner);
  }
  if (other_owner) return worker.owner() != *first_owner;
  if (other) return worker.id() != first_id;
  return true;  // no one else: the first worker re-measures, as with a single worker
}

v1::Trial* Coordinator::NextTrialLocked(JobEntry& job, const v1::WorkerInfo& worker,
                                        WriteBatch& batch) {
  const std::string& chip_type = worker.chip().chip_type();
  v1::Trial* oldest = nullptr;
  for (auto& [id, t] : job.trials)
    if (t.state() == v1::PENDING && (!oldest || t.seq() < oldest->seq()) &&
        MayLeaseLocked(t, worker))
      oldest = &t;
  if (oldest) return oldest;
  for (size_t i = 0; i < job.tasks.size(); ++i) {
    if (!job.tasks[i].baseline_created) {
      job.tasks[i].baseline_created = true;
      return &NewTrialLocked(job, i, v1::BASELINE);
    }
  }
  const bool model = IsModelJob(job.job.spec());
  // A model job whose shared budget is spent: each task's final rounds first, then the composed
  // step with their winners (also when the last proposals were answered from the store just now).
  auto finals_or_step = [&]() -> v1::Trial* {
    if (v1::Trial* final_trial = StartFinalsLocked(job, batch)) return final_trial;
    if (!StepDue(job)) return nullptr;
    v1::Trial& step = NewTrialLocked(job, 0, v1::STEP);
    *step.mutable_step() = BuildStepRequest(job);
    return &step;
  };
  if (model && PickModelTask(job) < 0) return finals_or_step();
  for (int cached = 0; cached < kMaxCachedPerCall;) {
    // Model jobs: the task with the largest expected gain in tokens/s (Ansor's rule); single
    // operators: the task furthest behind its budget share.
    int pick = -1;
    double least = 2;
    for (size_t i = 0; i < job.tasks.size() && !model; ++i) {
      const TaskState& t = job.tasks[i];
      double used = static_cast<double>(t.proposed) / std::max(1, job.Budget(i));
      // (finals_started: its budget was spent; `exhausted` is not stored across a restart)
      if (!job.BudgetSpent(i) && !t.finals_started && used < least) least = used, pick = i;
    }
    if (model) pick = PickModelTask(job);
    if (pick < 0) return model ? finals_or_step() : StartFinalsLocked(job, batch);
    TaskState& task = job.tasks[pick];
    if (!task.starts_loaded) {
      task.starts_loaded = true;
      if (task.proposed == 0) task.starts = StartingConfigs(job, pick, model);
    }
    std::vector<codegen::Config> configs;
    if (!task.starts.empty()) {  // the template's own suggestions go first
      configs = {task.starts.front()};
      task.starts.erase(task.starts.begin());
      task.strategy->Exclude(configs[0]);
    } else {
      auto propose_start = std::chrono::steady_clock::now();
      configs = task.strategy->Propose(1);
      if (metrics_) metrics_->Proposed(task.strategy->name(), configs.size(), propose_start);
      if (configs.empty()) {
        task.exhausted = true;
        continue;
      }
    }
    task.proposed++;
    v1::Trial& trial = NewTrialLocked(job, pick, v1::TUNE);
    *trial.mutable_config() = codegen::ToProto(configs[0]);
    auto record = store_->FindRecord(job.job.tasks(pick).workload_key(), chip_type,
                                     codegen::ConfigKey(configs[0]));
    // Only a record of the kernel the template renders today (see TuningRecord.kernel_digest).
    if (record.ok() && record->has_value() && Reusable((*record)->measurement().status()) &&
        (*record)->kernel_digest() == KernelDigest(job, pick, configs[0])) {
      v1::Measurement m = (*record)->measurement();
      m.set_from_cache(true);
      ApplyResultLocked(job, trial, m, "kiln", batch);
      ++cached;
      continue;
    }
    return &trial;
  }
  return nullptr;
}

absl::StatusOr<v1::LeaseTrialsResponse> Coordinator::LeaseTrials(
    const v1::LeaseTrialsRequest& request, const std::string& caller) {
  RETURN_IF_ERROR(ValidateWorkerId(request.worker_id()));
  if (request.max_trials() < 0 || request.max_trials() > 64)
    return absl::InvalidArgumentError("max_trials: must be in 1..64");
  if (request.wait_ms() < 0) return absl::InvalidArgumentError("wait_ms: must be >= 0");
  int max = std::max(1, request.max_trials());
  auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(std::min(request.wait_ms(), options_.max_lease_wait_ms));
  std::unique_lock<std::mutex> lock(mu_);
  v1::LeaseTrialsResponse out;
  while (true) {
    ASSIGN_OR_RETURN(WorkerEntry * entry, OwnWorkerLocked(request.worker_id(), caller));
    v1::WorkerInfo& worker = entry->info;
    worker.set_last_heartbeat_unix_ms(clock_->NowMs());
    const std::string& label = worker.chip().chip_type();
    WriteBatch batch;
    ExpireLeasesLocked(batch);
    std::vector<JobEntry*> order;
    for (auto& [id, job] : jobs_)
      if (!job->terminal() && absl::StartsWith(label, job->job.spec().chip()) &&
          (job->job.chip_type().empty() || job->job.chip_type() == label))
        order.push_back(job.get());
    std::stable_sort(order.begin(), order.end(), [](JobEntry* a, JobEntry* b) {
      return a->job.spec().priority() > b->job.spec().priority();
    });
    for (JobEntry* job : order) {
      if (job->job.chip_type().empty()) {
        absl::Status bound = BindLocked(*job, worker.chip());
        if (!bound.ok()) {
          FinishLocked(*job, v1::FAILED,
                       absl::StrCat("cannot tune on ", label, ": ", bound.message()), batch);
          continue;
        }
        job->job.set_state(v1::RUNNING);
        job->job.set_started_unix_ms(clock_->NowMs());
        batch.jobs.push_back(job->job);
        PushEventLocked(*job, v1::JobEvent::STATE);
      }
      while (out.trials_size() < max) {
        v1::Trial* t = NextTrialLocked(*job, worker, batch);
        if (!t) break;
        t->set_state(v1::LEASED);
        t->set_worker_id(worker.id());
        t->set_lease_expires_unix_ms(clock_->NowMs() + options_.lease_ttl_ms);
        if (t->kind() == v1::TUNE && options_.racing) {  // race against the task's best so far
          // With no best yet, any result is one (+infinity): the trial is timed briefly, and its
          // re-measurement, as for every new best, in full.
          const v1::TaskResult& task = job->job.tasks(t->task_index());
          t->set_race_us(task.has_best() ? task.best().median_us()
                                         : std::numeric_limits<double>::infinity());
        }
        batch.trials.push_back(*t);
        *out.add_trials() = *t;
      }
      MaybeFinishLocked(*job, batch);
      if (!batch.trials.empty() || !batch.records.empty()) batch.jobs.push_back(job->job);
      if (out.trials_size() >= max) break;
    }
    RETURN_IF_ERROR(WriteLocked(batch));
    if (!batch.empty()) UpdateGaugesLocked();
    if (out.trials_size() > 0 || shutdown_) return out;
    if (work_cv_.wait_until(lock, deadline) == std::cv_status::timeout) return out;
  }
}

void Coordinator::ApplyResultLocked(JobEntry& job, v1::Trial& trial, const v1::Measurement& m,
                                    const std::string& implementation, WriteBatch& batch) {
  trial.set_state(v1::DONE);
  *trial.mutable_measurement() = m;
  if (trial.kind() == v1::STEP)
    RefuseInexactStep(job.job.spec().dtype(), trial.mutable_measurement());
  batch.trials.push_back(trial);
  if (trial.kind() == v1::STEP) {  // the composed step's measured tokens/s
    ApplyStepResult(job, trial.measurement());
    if (metrics_ && job.job.tokens_per_second().measured() > 0)
      metrics_->SetBestTokensPerSecond(job.job.id(), job.job.tokens_per_second().measured());
    if (metrics_ && job.job.tokens_per_second().bound_fraction() > 0)
      metrics_->SetBoundFraction(job.job.id(), job.job.tokens_per_second().bound_fraction());
    PushEventLocked(job, v1::JobEvent::PROGRESS);
    return;
  }
  v1::TaskResult* task = job.job.mutable_tasks(trial.task_index());
  const std::string chip_type = job.job.chip_type();
  if (metrics_ && !m.from_cache()) metrics_->TrialFinished(chip_type, m);
  if (trial.kind() == v1::BASELINE && trial.final_round() == 0) {
    task->set_baseline_name(implementation.empty() ? "baseline" : implementation);
    *task->mutable_baseline() = m;
    PushEventLocked(job, v1::JobEvent::PROGRESS, trial.task_index());
    return;
  }
  if (trial.kind() == v1::FINAL || trial.kind() == v1::BASELINE) {  // a final round's trial
    task->set_final_trials_done(task->final_trials_done() + 1);
    if (task->final_trials_done() >= task->final_trials())
      DecideFinalsLocked(job, trial.task_index(), batch);
    else
      PushEventLocked(job, v1::JobEvent::PROGRESS, trial.task_index());
    return;
  }
  if (trial.kind() == v1::REMEASURE) {
    ApplyRemeasureLocked(job, trial, batch);
    return;
  }
  bool ok = m.status() == v1::OK;
  job.job.set_trials_done(job.job.trials_done() + 1);
  if (ok) {
    task->set_trials_ok(task->trials_ok() + 1);
  } else {
    task->set_trials_failed(task->trials_failed() + 1);
    job.job.set_trials_failed(job.job.trials_failed() + 1);
  }
  TaskState& state = job.tasks[trial.task_index()];
  if (state.strategy)
    state.strategy->Observe({{codegen::FromProto(trial.config()), m.status(), m.median_us()}});
  bool better = ok && (!task->has_best() || m.median_us() < task->best().median_us());
  // A new best's record waits for its re-measurement (ApplyRemeasureLocked): until another
  // measurement confirms it, its figure must not answer later jobs from the store.
  if (!m.from_cache() && !better) batch.records.push_back(RecordOf(job, trial, m, clock_->NowMs()));
  if (better && !m.from_cache()) {
    // A new best is measured once more before it is reported (DESIGN.md §5), by another worker
    // of the chip type when there is one (MayLeaseLocked).
    v1::Trial& again = NewTrialLocked(job, trial.task_index(), v1::REMEASURE);
    *again.mutable_config() = trial.config();
    again.set_exclude_worker_id(trial.worker_id());
    batch.trials.push_back(again);
    PushEventLocked(job, v1::JobEvent::PROGRESS, trial.task_index());
  } else if (better) {
    *task->mutable_best() = m;
    *task->mutable_best_config() = trial.config();
    UpdateBestTokensLocked(job);
    PushEventLocked(job, v1::JobEvent::NEW_BEST, trial.task_index(), &m);
  } else {
    PushEventLocked(job, v1::JobEvent::PROGRESS, trial.task_index());
  }
}

void Coordinator::ApplyRemeasureLocked(JobEntry& job, v1::Trial& again, WriteBatch& batch) {
  v1::TaskResult* task = job.job.mutable_tasks(again.task_index());
  v1::Measurement& m = *again.mutable_measurement();
  const v1::Trial* first = RemeasuredTrial(job, again);
  if (m.status() != v1::OK) {
    // A kernel that verified (or ran) only once is no best, and its record says so: the store
    // must not answer it as sound to a later job.
    batch.records.push_back(RecordOf(job, again, m, clock_->NowMs()));
    PushEventLocked(job, v1::JobEvent::PROGRESS, again.task_index());
    return;
  }
  const bool beats = !task->has_best() || m.median_us() < task->best().median_us();
  bool demoted = false;
  if (first && first->measurement().raced_ahead()) {
    // Timed briefly: its claim was only "surely faster than the best it raced"; the full timing
    // is its figure, and it confirms by still beating the best.
    demoted = !beats;
    if (demoted)
      m.set_message(absl::StrFormat(
          "demoted: re-measured %.1f us in full, not faster than the best %.1f us it raced ahead "
          "of (%.1f us timed briefly)",
          m.median_us(), task->best().median_us(), first->measurement().median_us()));
  } else if (first && m.median_us() > kConfirmRatio * first->measurement().median_us()) {
    const double before = first->measurement().median_us();
    demoted = true;
    m.set_message(absl::StrFormat("demoted: re-measured %.1f us vs %.1f us first (+%.1f%%)",
                                  m.median_us(), before, 100 * (m.median_us() / before - 1)));
  }
  m.set_demoted(demoted);
  for (auto it = batch.trials.rbegin(); it != batch.trials.rend(); ++it)
    if (it->id() == again.id()) {  // queued by ApplyResultLocked before the verdict
      *it = again;
      break;
    }
  // The record keeps the figure that stands: the first, unless it was timed briefly or did not
  // confirm (its record was held back until now).
  if (demoted || !first || first->measurement().raced_ahead())
    batch.records.push_back(RecordOf(job, again, m, clock_->NowMs()));
  else
    batch.records.push_back(RecordOf(job, *first, first->measurement(), clock_->NowMs()));
  // A demoted configuration is not made the best: the task keeps its best confirmed one. Only a
  // task with none confirmed takes the re-measured (slower, honest) figure, marked demoted, so
  // that a noisy host does not leave a task without any best; final rounds, when they run, time
  // it again in turns with the others.
  if (beats && (!demoted || !task->has_best() || task->best().demoted())) {
    *task->mutable_best() = m;
    *task->mutable_best_config() = again.config();
    UpdateBestTokensLocked(job);
    PushEventLocked(job, v1::JobEvent::NEW_BEST, again.task_index(), &m);
  } else {
    PushEventLocked(job, v1::JobEvent::PROGRESS, again.task_index());
  }
}

v1::Trial* Coordinator::StartFinalsLocked(JobEntry& job, WriteBatch& batch) {
  if (options_.final_rounds <= 0 || options_.finalists < 2) return nullptr;
  // A model job's tasks share one budget: they are due for final rounds once it is spent.
  const bool model = IsModelJob(job.job.spec());
  const bool model_spent = model && PickModelTask(job) < 0;
  v1::Trial* first = nullptr;
  for (size_t i = 0; i < job.tasks.size(); ++i) {
    TaskState& state = job.tasks[i];
    if (state.finals_started || !state.baseline_created ||
        !(model ? model_spent : job.BudgetSpent(i)))
      continue;
    bool answered = true;
    for (const auto& [id, t] : job.trials)
      answered = answered && (t.task_index() != static_cast<int>(i) || t.kind() == v1::STEP ||
                              t.state() == v1::DONE);
    if (!answered) continue;
    state.finals_started = true;
    const std::vector<v1::Config> finalists = Contenders(job, i, options_.finalists);
    if (finalists.size() < 2) continue;
    // Round after round, every finalist once, in the same order, then the task's fastest
    // baseline route: the trials are leased oldest first, so each round is timed back to back
    // and the baseline beside the finalists (its first figure may come from another moment of
    // a host whose memory bandwidth moves).
    v1::TaskResult* task = job.job.mutable_tasks(i);
    const v1::BaselineRoute* route = nullptr;
    for (const auto& r : task->baseline().baseline_routes())
      if (r.status() == v1::OK && (!route || r.median_us() < route->median_us())) route = &r;
    for (int round = 1; round <= options_.final_rounds; ++round) {
      for (const v1::Config& config : finalists) {
        v1::Trial& t = NewTrialLocked(job, i, v1::FINAL);
        *t.mutable_config() = config;
        t.set_final_round(round);
        batch.trials.push_back(t);
        if (!first) first = &t;
      }
      if (route) {
        v1::Trial& b = NewTrialLocked(job, i, v1::BASELINE);
        b.mutable_baseline_route()->set_name(route->name());
        b.mutable_baseline_route()->set_threads(route->threads());
        b.set_final_round(round);
        batch.trials.push_back(b);
      }
    }
    task->set_final_trials(options_.final_rounds *
                           (static_cast<int>(finalists.size()) + (route ? 1 : 0)));
    task->set_final_trials_done(0);
    batch.jobs.push_back(job.job);
    PushEventLocked(job, v1::JobEvent::PROGRESS, i);
  }
  return first;
}

void Coordinator::DecideFinalsLocked(JobEntry& job, int task_index, WriteBatch& batch) {
  struct Entry {
    v1::Config config;
    std::map<int, const v1::Trial*> rounds;
  };
  std::map<std::string, Entry> entries;  // by config key
  std::vector<std::string> order;        // first seen (the contenders' order)
  int rounds = 0;
  for (const auto& [id, t] : job.trials) {
    if (t.task_index() != task_index || t.kind() != v1::FINAL) continue;
    const std::string key = codegen::ConfigKey(codegen::FromProto(t.config()));
    auto [it, fresh] = entries.try_emplace(key);
    if (fresh) order.push_back(key), it->second.config = t.config();
    it->second.rounds[t.final_round()] = &t;
    rounds = std::max(rounds, t.final_round());
  }
  auto ok = [](const v1::Trial* t) { return t && t->measurement().status() == v1::OK; };
  std::map<int, double> fastest;  // per round, over the finalists that passed it
  for (const auto& [key, e] : entries)
    for (const auto& [round, t] : e.rounds)
      if (ok(t) && (!fastest.count(round) || t->measurement().median_us() < fastest[round]))
        fastest[round] = t->measurement().median_us();
  // Each finalist's record becomes its median round, or its first failed one: a kernel that
  // verifies only sometimes is not answered from the store as sound.
  auto median_round = [](const Entry& e) {
    std::vector<const v1::Trial*> rounds;
    for (const auto& [round, t] : e.rounds) rounds.push_back(t);
    std::sort(rounds.begin(), rounds.end(), [](const v1::Trial* a, const v1::Trial* b) {
      return a->measurement().median_us() < b->measurement().median_us();
    });
    return rounds[rounds.size() / 2];  // of an even count, the slower middle one
  };
  std::vector<v1::Finalist> finalists;
  for (const std::string& key : order) {
    const Entry& e = entries[key];
    const v1::Trial* figure = nullptr;
    for (const auto& [round, t] : e.rounds)
      if (!figure && !ok(t)) figure = t;
    if (!figure) figure = median_round(e);
    batch.records.push_back(RecordOf(job, *figure, figure->measurement(), clock_->NowMs()));
    v1::Finalist f;
    *f.mutable_config() = e.config;
    std::vector<double> ratios;
    for (int round = 1; round <= rounds; ++round) {
      auto it = e.rounds.find(round);
      const v1::Trial* t = it == e.rounds.end() ? nullptr : it->second;
      f.add_round_median_us(ok(t) ? t->measurement().median_us() : 0);
      if (ok(t))
        ratios.push_back(t->measurement().median_us() / fastest[round]);
      else
        f.set_failed(true);
    }
    if (!f.failed()) f.set_score(Median(ratios));
    finalists.push_back(std::move(f));
  }
  std::stable_sort(finalists.begin(), finalists.end(),
                   [](const v1::Finalist& a, const v1::Finalist& b) {
                     if (a.failed() != b.failed()) return !a.failed();
                     return a.score() < b.score();
                   });
  v1::TaskResult* task = job.job.mutable_tasks(task_index);
  task->clear_finalists();
  for (const auto& f : finalists) *task->add_finalists() = f;
  if (finalists.empty() || finalists.front().failed()) {
    // Every finalist failed a round (a kernel that verifies only sometimes, or crashes): none of
    // them is a best to report, and the fastest was one of them.
    task->clear_best();
    task->clear_best_config();
    PushEventLocked(job, v1::JobEvent::PROGRESS, task_index);
    return;
  }
  // The winner's figure: its median round.
  const Entry& winner = entries[codegen::ConfigKey(codegen::FromProto(finalists[0].config()))];
  *task->mutable_best() = median_round(winner)->measurement();
  *task->mutable_best_config() = winner.config;
  // The baseline's figure: its fastest route's median over the rounds it was timed in beside
  // the finalists (every route's first figure stays listed).
  std::vector<double> base_rounds;
  for (const auto& [id, t] : job.trials)
    if (t.task_index() == task_index && t.kind() == v1::BASELINE && t.final_round() > 0 && ok(&t))
      base_rounds.push_back(t.measurement().median_us());
  if (!base_rounds.empty() && task->has_baseline()) {
    v1::Measurement* base = task->mutable_baseline();
    const double first_us = base->median_us();
    base->set_median_us(Median(base_rounds));
    base->clear_samples_us();
    for (double us : base_rounds) base->add_samples_us(us);
    base->set_message(absl::StrCat("timed in ", base_rounds.size(),
                                   " final rounds beside the finalists (median of the rounds); ",
                                   "first timed ", absl::StrFormat("%.1f", first_us),
                                   " us when the task started"));
  }
  UpdateBestTokensLocked(job);
  PushEventLocked(job, v1::JobEvent::NEW_BEST, task_index, &task->best());
}

absl::StatusOr<v1::ReportResultsResponse> Coordinator::ReportResults(
    const v1::ReportResultsRequest& request, const std::string& caller) {
  RETURN_IF_ERROR(ValidateWorkerId(request.worker_id()));
  for (int i = 0; i < request.results_size(); ++i) {
    const auto& r = request.results(i);
    const auto& m = r.measurement();
    if (m.status() == v1::STATUS_UNSPECIFIED || !v1::MeasurementStatus_IsValid(m.status()))
      return absl::InvalidArgumentError(
          absl::StrCat("results[", i, "].measurement.status: required"));
    if (r.attempt() < 1)
      return absl::InvalidArgumentError(absl::StrCat("results[", i, "].attempt: must be >= 1"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(WorkerEntry * worker, OwnWorkerLocked(request.worker_id(), caller));
  for (int i = 0; i < request.results_size(); ++i)
    if (!trial_job_.count(request.results(i).trial_id()) &&
        !FindJobLocked(request.results(i).trial_id().substr(0, 14)))
      return absl::InvalidArgumentError(absl::StrCat("results[", i, "].trial_id: unknown trial '",
                                                     request.results(i).trial_id().substr(0, 40),
                                                     "'"));
  v1::ReportResultsResponse out;
  WriteBatch batch;
  for (const auto& r : request.results()) {
    auto jit = trial_job_.find(r.trial_id());
    JobEntry* job = jit == trial_job_.end() ? nullptr : FindJobLocked(jit->second);
    v1::Trial* trial = nullptr;
    if (job) {
      auto tit = job->trials.find(r.trial_id());
      if (tit != job->trials.end()) trial = &tit->second;
    }
    // An earlier attempt: a lease that expired or was released, its trial requeued since. The
    // reporter may have held it then; nothing is applied either way.
    if (!trial || job->terminal() || r.attempt() < trial->attempt()) {
      out.set_stale(out.stale() + 1);
      continue;
    }
    // Only the lease holder, at the attempt it was leased at, answers a trial: not a pending
    // trial, another worker's, one answered by another worker, or an attempt never leased.
    if (r.attempt() != trial->attempt() || trial->state() == v1::PENDING ||
        trial->worker_id() != request.worker_id()) {
      out.set_refused(out.refused() + 1);
      RefusedLocked("not_lease_holder");
      continue;
    }
    if (trial->state() == v1::DONE) {  // the holder's retry: reports are idempotent per attempt
      out.set_duplicates(out.duplicates() + 1);
      continue;
    }
    v1::Measurement m = r.measurement();
    m.set_from_cache(false);
    const std::string implausible = ImplausibleFigures(m, trial->kind());
    if (!implausible.empty()) {
      // Not requeued: the same worker could lease it again and again. The trial is answered as a
      // failure (it counts once against the budget, as any failed trial) without its figures,
      // and its record is no OK figure to answer later jobs with.
      out.set_refused(out.refused() + 1);
      RefusedLocked("implausible");
      m = v1::Measurement();
      m.set_status(v1::SUSPECT);
      m.set_message(absl::StrCat("refused by the coordinator: ", implausible));
    } else {
      out.set_accepted(out.accepted() + 1);
      worker->info.set_trials_done(worker->info.trials_done() + 1);
    }
    ApplyResultLocked(*job, *trial, m, r.implementation(), batch);
    MaybeFinishLocked(*job, batch);
    batch.jobs.push_back(job->job);
  }
  // A write the store refuses (a full disk) puts every job it touched back as stored
  // (WriteLocked): no count, best or budget moves, the trial stays leased, and the worker's
  // retry or the lease's expiry answers it later.
  RETURN_IF_ERROR(WriteLocked(batch));
  UpdateGaugesLocked();
  work_cv_.notify_all();
  return out;
}

}  // namespace kiln::server
