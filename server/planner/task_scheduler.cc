#include "server/planner/task_scheduler.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "codegen/knob_space.h"
#include "server/planner/planner.h"
#include "server/tuning_record.h"

namespace kiln::server {
namespace {

constexpr double kAlpha = 0.2;        // weight of the backward-looking term (Ansor's alpha)
constexpr int kWindow = 3;            // trials over which the recent improvement is measured
constexpr int kStepVariants = 3;      // a task's finalists timed inside the step, at most
constexpr int kStepRounds = 2;        // step rounds, the variants' order reversed in the second
constexpr double kStepMargin = 0.02;  // a lead inside the step below this is noise

// A configuration a task can run in the step rounds, with its median alone.
struct Candidate {
  v1::Config config;
  double alone_us = 0;
};

// The task's finalists that passed the final rounds (its winner first, with its best figure),
// or its best alone when it had no final rounds.
std::vector<Candidate> Candidates(const v1::TaskResult& t) {
  std::vector<Candidate> out;
  for (const v1::Finalist& f : t.finalists()) {
    if (f.failed() || static_cast<int>(out.size()) >= kStepVariants) continue;
    out.push_back({f.config(), Median({f.round_median_us().begin(), f.round_median_us().end()})});
  }
  if (out.empty() && t.has_best()) out.push_back({t.best_config(), 0});
  if (!out.empty()) out[0].alone_us = t.best().median_us();
  return out;
}

bool IsStepRound(const v1::Trial& t) {
  return t.kind() == v1::STEP && t.step().probe() && t.step().round() > 0;
}

std::string KeyOf(const v1::Config& c) { return codegen::ConfigKey(codegen::FromProto(c)); }

// The task's FINAL trial of `config` at its median round (what DecideLocked makes a winner's
// figure), or null.
const v1::Trial* MedianFinal(const JobEntry& job, int task, const std::string& config) {
  std::vector<const v1::Trial*> rounds;
  for (const auto& [id, t] : job.trials)
    if (t.task_index() == task && t.kind() == v1::FINAL && t.state() == v1::DONE &&
        t.measurement().status() == v1::OK && KeyOf(t.config()) == config)
      rounds.push_back(&t);
  if (rounds.empty()) return nullptr;
  std::sort(rounds.begin(), rounds.end(), [](const v1::Trial* a, const v1::Trial* b) {
    return a->measurement().median_us() < b->measurement().median_us();
  });
  return rounds[rounds.size() / 2];
}

// Once every step round is answered: each task's finalists scored by their time inside the
// step, and its best moved to the fastest there when that leads its winner beyond the margin.
std::vector<int> DecideStepRounds(JobEntry& job) {
  std::vector<const v1::Trial*> rounds;
  for (const auto& [id, t] : job.trials)
    if (IsStepRound(t)) {
      if (t.state() != v1::DONE) return {};
      rounds.push_back(&t);
    }
  std::vector<int> changed;
  for (int i = 0; i < job.job.tasks_size(); ++i) {
    v1::TaskResult* task = job.job.mutable_tasks(i);
    const std::vector<Candidate> cands = Candidates(*task);
    if (cands.size() < 2) continue;
    const std::string& workload = task->workload_key();
    // config key -> round -> its time a call in that round's steps (a config in several
    // variants of one round, as a task with fewer finalists is, is timed more than once)
    std::map<std::string, std::map<int, std::vector<double>>> times;
    for (const v1::Trial* t : rounds) {
      if (t->measurement().status() != v1::OK || i >= t->step().kernels_size()) continue;
      for (const v1::StepOpTime& o : t->measurement().step().op_times())
        if (o.workload_key() == workload && o.in_step_us() > 0)
          times[KeyOf(t->step().kernels(i).config())][t->step().round()].push_back(o.in_step_us());
    }
    auto mean = [](const std::vector<double>& v) {
      double sum = 0;
      for (double x : v) sum += x;
      return sum / v.size();
    };
    std::map<int, double> fastest;
    for (const auto& [config, by_round] : times)
      for (const auto& [round, us] : by_round)
        if (!fastest.count(round) || mean(us) < fastest[round]) fastest[round] = mean(us);
    std::vector<v1::Finalist> scored;
    for (const Candidate& c : cands) {
      v1::Finalist f;
      *f.mutable_config() = c.config;
      std::vector<double> ratios;
      const auto& by_round = times[KeyOf(c.config)];
      for (int r = 1; r <= kStepRounds; ++r) {
        auto it = by_round.find(r);
        f.add_round_median_us(it == by_round.end() ? 0 : mean(it->second));
        if (it == by_round.end())
          f.set_failed(true);  // that round's step failed: no figure inside the step
        else
          ratios.push_back(mean(it->second) / fastest[r]);
      }
      if (!f.failed()) f.set_score(Median(ratios));
      scored.push_back(std::move(f));
    }
    const v1::Finalist winner = scored[0];  // the final rounds' winner
    std::stable_sort(scored.begin(), scored.end(),
                     [](const v1::Finalist& a, const v1::Finalist& b) {
                       if (a.failed() != b.failed()) return !a.failed();
                       return a.score() < b.score();
                     });
    task->clear_step_finalists();
    for (const v1::Finalist& f : scored) *task->add_step_finalists() = f;
    const v1::Finalist& first = scored[0];
    const std::string key = KeyOf(first.config());
    if (first.failed() || winner.failed() || key == KeyOf(winner.config()) ||
        winner.score() - first.score() <= kStepMargin)
      continue;
    const v1::Trial* figure = MedianFinal(job, i, key);
    if (!figure) continue;
    *task->mutable_best() = figure->measurement();
    *task->mutable_best_config() = first.config();
    changed.push_back(i);
  }
  return changed;
}

}  // namespace

int TokensPerStep(const v1::JobSpec& spec) {
  const int batch = std::max(1, spec.batch());
  return spec.phase() == "prefill" ? batch * std::max(1, spec.prefill_tokens()) : batch;
}

int TotalProposed(const JobEntry& job) {
  int n = 0;
  for (const TaskState& t : job.tasks) n += t.proposed;
  return n;
}

int PickModelTask(const JobEntry& job, bool skip_awaiting) {
  const int n = static_cast<int>(job.tasks.size());
  auto passed_over = [&](int i) { return skip_awaiting && job.tasks[i].AwaitingProposals(); };
  // Every task gets one trial first, whatever the budget: each needs a verified kernel.
  for (int i = 0; i < n; ++i)
    if (job.tasks[i].proposed == 0 && !job.tasks[i].exhausted && !passed_over(i)) return i;
  if (TotalProposed(job) >= job.job.spec().budget_trials()) return -1;
  // Best latency after each DONE TUNE trial of each task, in proposal order.
  std::vector<std::vector<double>> curve(n);
  std::vector<const v1::Trial*> done;
  for (const auto& [id, t] : job.trials)
    if (t.kind() == v1::TUNE && t.state() == v1::DONE) done.push_back(&t);
  std::sort(done.begin(), done.end(),
            [](const v1::Trial* a, const v1::Trial* b) { return a->seq() < b->seq(); });
  for (const v1::Trial* t : done) {
    auto& c = curve[t->task_index()];
    double best = c.empty() ? 0 : c.back();
    const v1::Measurement& m = t->measurement();
    if (m.status() == v1::OK && m.median_us() > 0 && (best == 0 || m.median_us() < best))
      best = m.median_us();
    c.push_back(best);
  }
  // Latency now: the best so far, else the baseline's, else unknown; and each task's weight in
  // the step: its count times its in-step factor (how its kernel runs inside the step).
  std::vector<double> now(n, 0), weight(n, 1);
  double known = 0, sum = 0;
  for (int i = 0; i < n; ++i) {
    const v1::TaskResult& r = job.job.tasks(i);
    now[i] = !curve[i].empty() && curve[i].back() > 0
                 ? curve[i].back()
                 : (r.has_baseline() ? r.baseline().median_us() : 0);
    weight[i] = std::max(1, r.count()) * (r.in_step_factor() > 0 ? r.in_step_factor() : 1.0);
    if (now[i] > 0) known++, sum += now[i] * weight[i];
  }
  // The step time the tasks' bests make (those known), to turn saved microseconds into tokens/s.
  const double tokens = TokensPerStep(job.job.spec()), step_us = sum;
  int pick = -1;
  double most = -1;
  for (int i = 0; i < n; ++i) {
    const TaskState& s = job.tasks[i];
    if (job.BudgetSpent(i) || passed_over(i)) continue;
    const auto& c = curve[i];
    const double g = now[i];
    double saved_us;
    if (g <= 0) {  // nothing verified yet: as promising as an average task's whole share
      saved_us = (known > 0 ? sum / known : 1) / (s.proposed + 1);
    } else {
      double recent = 0;
      if (c.size() > kWindow && c[c.size() - 1 - kWindow] > 0)
        recent = (c[c.size() - 1 - kWindow] - c.back()) / kWindow;
      saved_us = weight[i] * (kAlpha * recent + (1 - kAlpha) * g / (s.proposed + 1));
    }
    // In tokens/s (the same order as saved_us: the gain grows with it).
    const double gain =
        step_us > 0 ? tokens / (step_us - std::min(saved_us, 0.99 * step_us)) - tokens / step_us
                    : saved_us;
    if (gain > most) most = gain, pick = i;
  }
  return pick;
}

bool ProbeDue(const JobEntry& job) {
  const v1::JobSpec& spec = job.job.spec();
  if (spec.no_step_probe()) return false;
  const int budget = spec.budget_trials(), proposed = TotalProposed(job);
  if (2 * proposed < budget || budget - proposed < static_cast<int>(job.tasks.size())) return false;
  for (size_t i = 0; i < job.tasks.size(); ++i)
    if (!job.tasks[i].baseline_created || !job.job.tasks(i).has_best()) return false;
  for (const auto& [id, t] : job.trials)
    if (t.kind() == v1::STEP && t.step().probe()) return false;
  return true;
}

bool StepPending(const JobEntry& job) {
  for (const auto* open : {&job.pending, &job.leased})
    for (const auto& [seq, t] : *open)
      if (t->kind() == v1::STEP) return true;
  return false;
}

namespace {

// StepRoundsDue once the job is settled and its budget spent (StepDue has checked that already).
bool StepRoundsDueWhenSpent(const JobEntry& job) {
  if (job.job.spec().no_step_probe()) return false;
  bool contest = false;
  for (size_t i = 0; i < job.tasks.size(); ++i) {
    const v1::TaskResult& t = job.job.tasks(i);
    if (!job.tasks[i].baseline_created || !t.has_best() || t.final_trials_done() < t.final_trials())
      return false;
    contest = contest || Candidates(t).size() >= 2;
  }
  if (!contest) return false;
  for (const auto& [id, t] : job.trials)
    if (IsStepRound(t)) return false;
  return true;
}

}  // namespace

bool StepRoundsDue(const JobEntry& job) {
  return job.Settled() && PickModelTask(job) < 0 && StepRoundsDueWhenSpent(job);
}

std::vector<v1::StepRequest> BuildStepRounds(const JobEntry& job) {
  std::vector<std::vector<Candidate>> cands;
  int variants = 1;
  for (const v1::TaskResult& t : job.job.tasks()) {
    cands.push_back(Candidates(t));
    variants = std::max(variants, static_cast<int>(cands.back().size()));
  }
  std::vector<v1::StepRequest> out;
  for (int r = 1; r <= kStepRounds; ++r)
    for (int k = 0; k < variants; ++k) {
      const int v = r % 2 ? k : variants - 1 - k;
      v1::StepRequest req = BuildStepRequest(job, /*probe=*/true);
      req.set_variant(v);
      req.set_round(r);
      for (size_t i = 0; i < cands.size(); ++i) {
        if (cands[i].empty()) continue;
        const Candidate& c = cands[i][v < static_cast<int>(cands[i].size()) ? v : 0];
        *req.mutable_kernels(i)->mutable_config() = c.config;
        req.mutable_kernels(i)->set_isolated_us(c.alone_us);
      }
      out.push_back(std::move(req));
    }
  return out;
}

bool StepDue(const JobEntry& job) {
  if (!job.Settled() || PickModelTask(job) >= 0 || StepRoundsDueWhenSpent(job)) return false;
  for (const auto& [id, t] : job.trials)
    if (t.kind() == v1::STEP && !t.step().probe()) return false;
  for (size_t i = 0; i < job.tasks.size(); ++i)
    if (!job.tasks[i].baseline_created || !job.job.tasks(i).has_best()) return false;
  return true;
}

v1::StepRequest BuildStepRequest(const JobEntry& job, bool probe) {
  const v1::JobSpec& spec = job.job.spec();
  v1::StepRequest r;
  *r.mutable_arch() = spec.arch();
  r.set_phase(spec.phase());
  r.set_batch(spec.batch());
  r.set_context(spec.context());
  r.set_prefill_tokens(spec.prefill_tokens());
  r.set_dtype(spec.dtype());
  r.set_layers(spec.step_layers());
  r.set_probe(probe);
  for (const auto& t : job.job.tasks()) {
    v1::StepKernel* k = r.add_kernels();
    *k->mutable_workload() = t.workload();
    *k->mutable_config() = t.best_config();
    k->set_isolated_us(t.best().median_us());
  }
  return r;
}

void UpdateEstimate(JobEntry& job) {
  if (job.job.spec().model().empty() && job.job.spec().hf_config_json().empty()) return;
  const int tokens = TokensPerStep(job.job.spec());
  v1::StepResult* tps = job.job.mutable_tokens_per_second();
  tps->set_estimated(EstimateTokensPerSecond(job.job, tokens));
}

std::vector<int> ApplyStepResult(JobEntry& job, const v1::Trial& trial) {
  const v1::Measurement& m = trial.measurement();
  if (IsStepRound(trial)) return DecideStepRounds(job);
  if (trial.step().probe()) {
    if (m.status() != v1::OK || !m.has_step()) return {};  // the factors stay 1
    std::map<std::string, double> factor;
    for (const v1::StepOpTime& t : m.step().op_times())
      if (t.in_step_us() > 0 && t.isolated_us() > 0)
        factor[t.workload_key()] = std::clamp(t.in_step_us() / t.isolated_us(), 0.1, 10.0);
    for (v1::TaskResult& t : *job.job.mutable_tasks()) {
      auto it = factor.find(t.workload_key());
      if (it != factor.end()) t.set_in_step_factor(it->second);
    }
    return {};
  }
  v1::StepResult* tps = job.job.mutable_tokens_per_second();
  const double estimated = tps->estimated();
  if (m.has_step()) *tps = m.step();
  tps->set_estimated(estimated);
  if (m.status() == v1::WRONG_RESULT) {
    // Refused (its logits are not LibTorch's): Kiln's figures are of a wrong step and are not
    // published; LibTorch's, the bound and the max_error stay to show why.
    tps->clear_measured();
    tps->clear_step_us();
    tps->clear_samples_us();
    tps->clear_bound_fraction();
    tps->set_note("refused: " + m.message());
  } else if (m.status() != v1::OK) {
    tps->set_note("step not measured: " + m.message());
  }
  return {};
}

}  // namespace kiln::server
