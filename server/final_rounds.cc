#include "server/final_rounds.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codegen/knob_space.h"
#include "server/planner/task_scheduler.h"
#include "server/tuning_record.h"
#include "server/validate.h"

namespace kiln::server {
namespace {

// Final rounds: a configuration slower than the fastest by more than this is not a contender
// (host noise moves memory-bound kernels by +-30% between trials, not by 1.5x).
constexpr double kFinalMargin = 1.5;

}  // namespace

std::vector<v1::Config> FinalContenders(const JobEntry& job, int task, int k) {
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

FinalRounds::FinalRounds(int rounds, int finalists, const Clock* clock, Hooks hooks)
    : rounds_(rounds), finalists_(finalists), clock_(clock), hooks_(std::move(hooks)) {}

v1::Trial* FinalRounds::StartLocked(JobEntry& job, WriteBatch& batch) {
  if (rounds_ <= 0 || finalists_ < 2) return nullptr;
  // A model job's tasks share one budget: they are due for final rounds once it is spent.
  const bool model = IsModelJob(job.job.spec());
  const bool model_spent = model && PickModelTask(job) < 0;
  v1::Trial* first = nullptr;
  for (size_t i = 0; i < job.tasks.size(); ++i) {
    TaskState& state = job.tasks[i];
    if (state.finals_started || !state.baseline_created ||
        !(model ? model_spent : job.BudgetSpent(i)))
      continue;
    bool answered = true;  // no trial of the task (but the composed step) pending or leased
    for (const auto* open : {&job.pending, &job.leased})
      for (const auto& [seq, t] : *open)
        answered = answered && (t->task_index() != static_cast<int>(i) || t->kind() == v1::STEP);
    if (!answered) continue;
    state.finals_started = true;
    const std::vector<v1::Config> finalists = FinalContenders(job, i, finalists_);
    if (finalists.size() < 2) continue;
    // Round after round, every finalist once, in the same order, then the task's fastest
    // baseline route: the trials are leased oldest first, so each round is timed back to back
    // and the baseline beside the finalists (its first figure may come from another moment of
    // a host whose memory bandwidth moves).
    v1::TaskResult* task = job.job.mutable_tasks(i);
    const v1::BaselineRoute* route = nullptr;
    for (const auto& r : task->baseline().baseline_routes())
      if (r.status() == v1::OK && (!route || r.median_us() < route->median_us())) route = &r;
    for (int round = 1; round <= rounds_; ++round) {
      for (const v1::Config& config : finalists) {
        v1::Trial& t = hooks_.new_trial(job, i, v1::FINAL);
        *t.mutable_config() = config;
        t.set_final_round(round);
        batch.trials.push_back(t);
        if (!first) first = &t;
      }
      if (route) {
        v1::Trial& b = hooks_.new_trial(job, i, v1::BASELINE);
        b.mutable_baseline_route()->set_name(route->name());
        b.mutable_baseline_route()->set_threads(route->threads());
        b.set_final_round(round);
        batch.trials.push_back(b);
      }
    }
    task->set_final_trials(rounds_ * (static_cast<int>(finalists.size()) + (route ? 1 : 0)));
    task->set_final_trials_done(0);
    batch.jobs.push_back(job.job);
    hooks_.push_event(job, v1::JobEvent::PROGRESS, i, nullptr);
  }
  return first;
}

void FinalRounds::DecideLocked(JobEntry& job, int task_index, WriteBatch& batch) {
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
    hooks_.push_event(job, v1::JobEvent::PROGRESS, task_index, nullptr);
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
  hooks_.best_changed(job);
  hooks_.push_event(job, v1::JobEvent::NEW_BEST, task_index, &task->best());
}

}  // namespace kiln::server
