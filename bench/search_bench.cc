// kiln-bench-search: compares search strategies on replayed measurement sets (DESIGN.md §6).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/pretrain/pretrain.h"
#include "agent/strategy.h"
#include "bench/search_eval.h"
#include "common/flags.h"
#include "common/json_text.h"

namespace {

constexpr char kUsage[] =
    "usage: kiln-bench-search --space FILE... --strategy NAME... [--seeds N] [--budget B]\n"
    "                         [--holdout] [--transfer] [--json] [--jobs N] [--verbose]\n"
    "  Runs every strategy N times (seeds 1..N) on every replay set and prints, per space and\n"
    "  strategy, trials to reach 95% of the best configuration's performance against random\n"
    "  search without replacement, computed exactly from the space, median against median and\n"
    "  mean against mean:\n"
    "    median95    the strategy's median over seeds (>budget: under half the runs reached it)\n"
    "    rnd-med     random's median: the smallest t with P(a 95% one among t draws) >= 1/2\n"
    "    ratio-med   rnd-med / median95 (median95 taken as B when >budget)\n"
    "    ratio-CI    95% bootstrap interval of ratio-med over seeds (1000 resamples of the runs)\n"
    "    mean95      the strategy's mean over seeds; a run that missed the target within B trials\n"
    "                counts as B, so with reached < 100% it is a lower bound\n"
    "    rnd-mean    random's mean, (n+1)/(g+1) for g such configurations among n\n"
    "    ratio-mean  rnd-mean / mean95\n"
    "  plus the share of runs reaching the target within B trials and the score\n"
    "  (strategy - random) / (optimum - random) at 10% and 25% of B. With several spaces, a line\n"
    "  per strategy gives the geometric means of both ratios over them. --json gives the same\n"
    "  per row (\"ratio\" is the median one; \"random_expected_trials_to_95\" is random's mean).\n"
    "  --strategy default means whatever jobs use by default; NAME:CHECKPOINT warm-starts a\n"
    "  learning strategy (a path here, or a name in $KILN_CHECKPOINT_DIR). --verbose lists every "
    "run's trials to 95% on stderr.\n"
    "  --holdout: leave-one-out. A strategy that starts from a checkpoint (NAME:CHECKPOINT, or "
    "the\n"
    "  default when it names one) is run twice: as given, and on each space from a checkpoint\n"
    "  pretrained (as `kiln agent pretrain` does) on all the other spaces given, the row marked\n"
    "  [loo] (\"holdout\": \"loo-checkpoint\"; the as-given row is \"given-checkpoint\", before "
    "it).\n"
    "  Strategies with no learned state run once (\"holdout\": \"no learned state\").\n"
    "  --transfer: whether a checkpoint's prior helps, per space. Each strategy that can start\n"
    "  from a checkpoint (policy, and so the default) runs the same seeds with no prior (the\n"
    "  strategy as given, or a row [no prior] when it names a checkpoint) and from the\n"
    "  leave-one-out checkpoint of --holdout ([loo]); a checkpoint given is run too, marked as\n"
    "  possibly trained on the space. A table per strategy then gives both medians, their ratio\n"
    "  no-prior / loo with a 95% bootstrap interval over seeds (resampled in pairs: runs of one\n"
    "  seed are drawn together) and a verdict: helped (interval above 1), hurt (below 1), or no\n"
    "  difference within noise; --json adds a \"transfer\" array. Needs two spaces or more.\n"
    "  Defaults: --seeds 20 --budget 1000 --jobs <cores>.\n";

struct Options {
  std::vector<std::string> spaces, strategies;
  int seeds = 20, budget = 1000, jobs = 0;
  bool json = false, verbose = false, holdout = false, transfer = false;
};

constexpr int kResamples = 1000;  // bootstrap resamples of the seeds

bool ParseInt(const std::string& s, int lo, int* out) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || v < lo || v > 1000000) return false;
  *out = static_cast<int>(v);
  return true;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "kiln-bench-search: %s\n%s", msg.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool help = false;
  using kiln::Flag;
  auto on = [](bool* out) {
    return [out](const std::string&) {
      *out = true;
      return std::string();
    };
  };
  auto add_to = [](std::vector<std::string>* out) {
    return [out](const std::string& v) {
      out->push_back(v);
      return std::string();
    };
  };
  auto positive = [](const char* name, int* out) {
    return [name, out](const std::string& v) {
      return ParseInt(v, 1, out) ? std::string()
                                 : std::string(name) + " must be a positive integer";
    };
  };
  const std::vector<Flag> flags = {
      {"-h", Flag::kSwitch, on(&help), /*stop=*/true},
      {"--help", Flag::kSwitch, on(&help), /*stop=*/true},
      {"--json", Flag::kSwitch, on(&o.json)},
      {"--verbose", Flag::kSwitch, on(&o.verbose)},
      {"--holdout", Flag::kSwitch, on(&o.holdout)},
      {"--transfer", Flag::kSwitch, on(&o.transfer)},
      {"--space", Flag::kList, add_to(&o.spaces)},
      {"--strategy", Flag::kList, add_to(&o.strategies)},
      {"--seeds", Flag::kValue, positive("--seeds", &o.seeds)},
      {"--budget", Flag::kValue, positive("--budget", &o.budget)},
      {"--jobs", Flag::kValue, positive("--jobs", &o.jobs)},
  };
  if (auto error = kiln::ParseFlags(argc, argv, flags)) return Fail(error->message);
  if (help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (o.spaces.empty()) return Fail("--space needs at least one file");
  if (o.strategies.empty()) return Fail("--strategy needs at least one name");
  for (const auto& s : o.strategies) {
    const auto [name, path] = kiln::bench::SplitCheckpointPath(s);
    if (auto st = kiln::agent::CheckStrategyName(name); !st.ok())
      return Fail(std::string(st.message()));
    if (!path.empty() && name != "policy") return Fail(name + " takes no checkpoint");
    if (!path.empty() && !std::ifstream(path)) return Fail("checkpoint " + path + ": cannot read");
  }
  if (o.jobs == 0) o.jobs = std::max(1u, std::thread::hardware_concurrency());

  std::vector<kiln::bench::Space> spaces;
  for (const auto& path : o.spaces) {
    auto s = kiln::bench::PrepareSpace(path);
    if (!s.ok()) {
      std::fprintf(stderr, "kiln-bench-search: %s\n", std::string(s.status().message()).c_str());
      return 1;
    }
    spaces.push_back(std::move(*s));
  }
  const std::vector<kiln::bench::Row> rows =
      kiln::bench::PlanRows(o.strategies, o.holdout, o.transfer);
  const std::vector<kiln::bench::TransferRows> transfers = kiln::bench::PlanTransfers(rows);
  if (o.transfer && transfers.empty())
    return Fail("--transfer needs a strategy that can start from a checkpoint (policy, default)");
  const bool any_loo = std::any_of(rows.begin(), rows.end(), [](const kiln::bench::Row& r) {
    return r.holdout == kiln::bench::Holdout::kLeaveOneOut;
  });
  if (any_loo && spaces.size() < 2)
    return Fail(o.transfer ? "--transfer needs two spaces or more"
                           : "--holdout with a strategy that starts from a checkpoint needs two "
                             "spaces or more");

  // Leave-one-out checkpoints, one per space, each pretrained on the other spaces only; what each
  // knows of its held-out space goes to stderr (the "held out" line of `kiln agent pretrain`).
  std::vector<std::string> loo_checkpoints(spaces.size());
  std::string loo_dir;
  if (any_loo) {
    std::string templ = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                        "/kiln-holdout-XXXXXX";
    if (!mkdtemp(templ.data())) return Fail("--holdout: cannot create a temporary directory");
    loo_dir = templ;
    std::vector<std::string> logs(spaces.size()), failures(spaces.size());
    std::atomic<size_t> next_space{0};
    auto pretrain = [&] {
      for (size_t si; (si = next_space++) < spaces.size();) {
        loo_checkpoints[si] = loo_dir + "/" + std::to_string(si) + ".pt";
        std::ostringstream log;
        auto st = kiln::agent::Pretrain(kiln::bench::LeaveOneOutSets(spaces, si),
                                        kiln::agent::PretrainOptions{}, loo_checkpoints[si], &log,
                                        {kiln::agent::TrainingSetOf(*spaces[si].set)});
        if (!st.ok()) failures[si] = std::string(st.message());
        std::istringstream lines(log.str());
        for (std::string line; std::getline(lines, line);)
          if (line.find("held out") != std::string::npos) logs[si] += line + "\n";
      }
    };
    std::vector<std::thread> pool;
    for (int j = 0; j < o.jobs; ++j) pool.emplace_back(pretrain);
    for (auto& t : pool) t.join();
    for (size_t si = 0; si < spaces.size(); ++si) {
      if (!failures[si].empty()) {
        std::fprintf(stderr, "kiln-bench-search: --holdout pretraining for %s: %s\n",
                     spaces[si].path.c_str(), failures[si].c_str());
        std::filesystem::remove_all(loo_dir);
        return 1;
      }
      std::fputs(logs[si].c_str(), stderr);
    }
  }

  // Every (space, row, seed) run is independent: spread them over `jobs` threads.
  const size_t per_space = rows.size() * o.seeds;
  std::vector<kiln::bench::Trace> traces(spaces.size() * per_space);
  std::vector<std::string> errors(traces.size());
  std::atomic<size_t> next{0};
  const int keep_going = (o.budget + 3) / 4;
  auto work = [&] {
    for (size_t i; (i = next++) < traces.size();) {
      const size_t si = i / per_space;
      const auto& row = rows[(i % per_space) / o.seeds];
      uint64_t seed = 1 + i % o.seeds;
      const std::string& checkpoint =
          row.holdout == kiln::bench::Holdout::kLeaveOneOut ? loo_checkpoints[si] : row.checkpoint;
      auto t = kiln::bench::RunOnce(spaces[si], row.name, seed, o.budget, keep_going, checkpoint);
      if (t.ok())
        traces[i] = std::move(*t);
      else
        errors[i] = std::string(t.status().message());
    }
  };
  std::vector<std::thread> pool;
  for (int j = 0; j < o.jobs; ++j) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  if (!loo_dir.empty()) std::filesystem::remove_all(loo_dir);
  for (const auto& e : errors)
    if (!e.empty()) {
      std::fprintf(stderr, "kiln-bench-search: %s\n", e.c_str());
      return 1;
    }

  // A row's name in the table: the strategy as given, [loo] on a leave-one-out rerun, [no prior]
  // on a rerun without the checkpoint given.
  auto label = [&](const kiln::bench::Row& row) {
    switch (row.holdout) {
      case kiln::bench::Holdout::kLeaveOneOut:
        return row.strategy + " [loo]";
      case kiln::bench::Holdout::kNoPrior:
        return row.strategy + " [no prior]";
      default:
        return row.strategy;
    }
  };
  if (o.verbose)
    for (size_t i = 0; i < traces.size(); ++i)
      std::fprintf(stderr, "run %s %s seed %zu: trials to 95%% %d\n",
                   spaces[i / per_space].set->name.c_str(),
                   label(rows[(i % per_space) / o.seeds]).c_str(), 1 + i % o.seeds,
                   traces[i].trials_to_target);
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  if (!o.json) {
    if (o.holdout || o.transfer)
      std::printf(
          "%s: [loo] rows start on each space from a checkpoint pretrained on the other spaces "
          "only; rows without it hold no learned state (or are the checkpoint as given)%s\n",
          o.transfer ? "--transfer" : "--holdout",
          o.transfer ? "; [no prior] rows are a strategy given a checkpoint, run without it" : "");
    std::printf("%-28s %-18s %8s %7s %9s %13s %8s %8s %10s %7s %7s %7s %8s\n", "space", "strategy",
                "median95", "rnd-med", "ratio-med", "ratio-CI", "mean95", "rnd-mean", "ratio-mean",
                "reached", "score10", "score25", "ms/trial");
  }
  // Per row, the sums of log ratios over spaces for the geometric-mean lines, and per bootstrap
  // draw the same sum (each space's seeds resampled on their own) for the geomean's interval.
  std::vector<double> log_median_ratio(rows.size()), log_mean_ratio(rows.size());
  std::vector<std::vector<double>> log_boot_ratio(rows.size(), std::vector<double>(kResamples));
  auto json_number = [](double v, int decimals) {
    return std::isfinite(v) ? nlohmann::ordered_json(kiln::RoundTo(v, decimals))
                            : nlohmann::ordered_json(nullptr);
  };
  // A median over seeds is a whole number of trials or halfway between two; null: unreached.
  auto json_median = [](double m) {
    if (!std::isfinite(m) || m <= 0) return nlohmann::ordered_json(nullptr);
    return m == std::floor(m) ? nlohmann::ordered_json(static_cast<int64_t>(m))
                              : nlohmann::ordered_json(m);
  };
  auto text_median = [](double m) {
    return std::isfinite(m) && m > 0 ? absl::StrFormat("%g", m) : std::string(">budget");
  };
  for (size_t si = 0; si < spaces.size(); ++si) {
    const auto& space = spaces[si];
    const int n = static_cast<int>(space.sorted_us.size());
    const int random_median = kiln::bench::RandomMedianTrials(n, space.good);
    const double random_mean = kiln::bench::RandomExpectedTrials(n, space.good);
    for (size_t k = 0; k < rows.size(); ++k) {
      std::vector<kiln::bench::Trace> runs(traces.begin() + si * per_space + k * o.seeds,
                                           traces.begin() + si * per_space + (k + 1) * o.seeds);
      auto s = kiln::bench::Summarize(space, runs, o.budget);
      const auto& row = rows[k];
      const std::string& name = row.strategy;
      bool is_default = name == "default" || name == kiln::agent::kDefaultStrategy;
      // Median against median and mean against mean: random's mean over the agent's median
      // flatters the agent on the skewed trials-to-target distributions of search.
      double ratio_median = kiln::bench::MedianRatio(random_median, s.median_trials, o.budget);
      double ratio_mean = random_mean / std::max(s.mean_trials, 1.0);
      log_median_ratio[k] += std::log(ratio_median);
      log_mean_ratio[k] += std::log(ratio_mean);
      // Bootstrap over seeds, seeded by the row's place so that the table is reproducible.
      std::vector<double> boot =
          kiln::bench::BootstrapMedians(runs, kResamples, 1 + si * rows.size() + k);
      std::vector<double> boot_ratio;
      for (size_t b = 0; b < boot.size(); ++b) {
        boot_ratio.push_back(kiln::bench::MedianRatio(random_median, boot[b], o.budget));
        log_boot_ratio[k][b] += std::log(boot_ratio.back());
      }
      const auto median_ci = kiln::bench::PercentileInterval(boot);
      const auto ratio_ci = kiln::bench::PercentileInterval(boot_ratio);
      if (o.json) {
        using kiln::RoundTo;
        results.push_back(
            {{"space", space.path},
             {"strategy", name},
             {"resolved_strategy", name == "default" ? kiln::agent::kDefaultStrategy : name},
             {"is_default", is_default},
             {"holdout", kiln::bench::HoldoutLabel(row.holdout)},
             {"median_trials_to_95", json_median(s.median_trials)},
             {"median_ci", {json_number(median_ci.lo, 1), json_number(median_ci.hi, 1)}},
             {"mean_trials_to_95", RoundTo(s.mean_trials, 2)},
             {"reached_share", RoundTo(s.reached_share, 4)},
             {"random_median_trials_to_95", random_median},
             {"random_mean_trials_to_95", RoundTo(random_mean, 2)},
             {"random_expected_trials_to_95", RoundTo(random_mean, 2)},
             {"ratio", RoundTo(ratio_median, 3)},
             {"ratio_median", RoundTo(ratio_median, 3)},
             {"ratio_ci", {RoundTo(ratio_ci.lo, 3), RoundTo(ratio_ci.hi, 3)}},
             {"ratio_mean", RoundTo(ratio_mean, 3)},
             {"score_10", RoundTo(s.score_10, 4)},
             {"score_25", RoundTo(s.score_25, 4)},
             {"agent_ms_per_trial", RoundTo(s.agent_ms_per_trial, 4)},
             {"configs", n},
             {"good", space.good}});
      } else {
        std::string stem = space.set->name;
        std::printf("%-28s %-18s %8s %7d %9.1f %13s %8.1f %8.1f %10.1f %6.0f%% %7.3f %7.3f %8.3f\n",
                    stem.c_str(), label(row).c_str(), text_median(s.median_trials).c_str(),
                    random_median, ratio_median,
                    absl::StrFormat("[%.1f, %.1f]", ratio_ci.lo, ratio_ci.hi).c_str(),
                    s.mean_trials, random_mean, ratio_mean, 100 * s.reached_share, s.score_10,
                    s.score_25, s.agent_ms_per_trial);
      }
    }
  }
  nlohmann::ordered_json geomeans = nlohmann::ordered_json::array();
  if (spaces.size() > 1)
    for (size_t k = 0; k < rows.size(); ++k) {
      std::vector<double> boot;
      for (double l : log_boot_ratio[k]) boot.push_back(std::exp(l / spaces.size()));
      const auto ci = kiln::bench::PercentileInterval(boot);
      const double median_ratio = std::exp(log_median_ratio[k] / spaces.size());
      const double mean_ratio = std::exp(log_mean_ratio[k] / spaces.size());
      if (o.json)
        geomeans.push_back({{"strategy", rows[k].strategy},
                            {"holdout", kiln::bench::HoldoutLabel(rows[k].holdout)},
                            {"spaces", spaces.size()},
                            {"ratio_median", kiln::RoundTo(median_ratio, 3)},
                            {"ratio_ci", {kiln::RoundTo(ci.lo, 3), kiln::RoundTo(ci.hi, 3)}},
                            {"ratio_mean", kiln::RoundTo(mean_ratio, 3)}});
      else
        std::printf("geomean over %zu spaces, %s: ratio-med %.1f [%.1f, %.1f], ratio-mean %.1f\n",
                    spaces.size(), label(rows[k]).c_str(), median_ratio, ci.lo, ci.hi, mean_ratio);
    }

  // --transfer: per strategy and space, no prior against the leave-one-out checkpoint (and the
  // checkpoint given), on the same seeds.
  nlohmann::ordered_json transfer = nlohmann::ordered_json::array();
  for (const auto& t : transfers) {
    const bool given = t.given >= 0;
    if (!o.json) {
      std::printf(
          "\ntransfer, %s: trials to 95%% (median over seeds) with no prior and from a checkpoint "
          "pretrained on the other spaces only (loo); ratio = no-prior / loo, 95%% bootstrap "
          "interval over seeds resampled in pairs; helped: interval above 1, hurt: below 1\n",
          t.strategy.c_str());
      std::printf("%-28s %9s %9s %7s %15s %8s", "space", "no-prior", "loo", "ratio", "ratio-CI",
                  "prior-on");
      if (given) std::printf(" %9s %7s %15s %8s", "given*", "ratio*", "ratio*-CI", "prior-on");
      std::printf("  verdict\n");
    }
    int helped = 0, hurt = 0;
    for (size_t si = 0; si < spaces.size(); ++si) {
      auto runs_of = [&](size_t row) {
        auto first = traces.begin() + si * per_space + row * o.seeds;
        return std::vector<kiln::bench::Trace>(first, first + o.seeds);
      };
      // The share of runs whose prior got weight at some learning update: where it is 0, the
      // prior never ranked the first results well enough and the runs are the no-prior ones.
      auto prior_on = [](const std::vector<kiln::bench::Trace>& runs) {
        return std::count_if(runs.begin(), runs.end(),
                             [](const kiln::bench::Trace& r) { return r.prior_weighted > 0; }) /
               static_cast<double>(runs.size());
      };
      // Seeded by the no-prior row's place, as that row's own interval in the table above.
      const uint64_t boot_seed = 1 + si * rows.size() + t.no_prior;
      const auto no_prior = runs_of(t.no_prior), loo_runs = runs_of(t.loo);
      const auto loo =
          kiln::bench::CompareTransfer(no_prior, loo_runs, o.budget, kResamples, boot_seed);
      kiln::bench::TransferComparison seen;
      std::vector<kiln::bench::Trace> given_runs;
      if (given) {
        given_runs = runs_of(t.given);
        seen = kiln::bench::CompareTransfer(no_prior, given_runs, o.budget, kResamples, boot_seed);
      }
      helped += std::string(loo.verdict) == "helped";
      hurt += std::string(loo.verdict) == "hurt";
      if (o.json) {
        using kiln::RoundTo;
        nlohmann::ordered_json j = {{"space", spaces[si].path},
                                    {"strategy", t.strategy},
                                    {"no_prior_median", json_median(loo.no_prior_median)},
                                    {"loo_median", json_median(loo.prior_median)},
                                    {"ratio", RoundTo(loo.ratio, 3)},
                                    {"ci_low", RoundTo(loo.ci.lo, 3)},
                                    {"ci_high", RoundTo(loo.ci.hi, 3)},
                                    {"verdict", loo.verdict},
                                    {"loo_prior_on_share", RoundTo(prior_on(loo_runs), 4)}};
        if (given) {
          // The checkpoint given may have been trained on this very space: no test of transfer.
          j["given_median"] = json_median(seen.prior_median);
          j["given_ratio"] = RoundTo(seen.ratio, 3);
          j["given_ci_low"] = RoundTo(seen.ci.lo, 3);
          j["given_ci_high"] = RoundTo(seen.ci.hi, 3);
          j["given_prior_on_share"] = RoundTo(prior_on(given_runs), 4);
          j["given_seen_space"] = true;
        }
        transfer.push_back(std::move(j));
      } else {
        std::printf("%-28s %9s %9s %7.2f %15s %7.0f%%", spaces[si].set->name.c_str(),
                    text_median(loo.no_prior_median).c_str(), text_median(loo.prior_median).c_str(),
                    loo.ratio, absl::StrFormat("[%.2f, %.2f]", loo.ci.lo, loo.ci.hi).c_str(),
                    100 * prior_on(loo_runs));
        if (given)
          std::printf(" %9s %7.2f %15s %7.0f%%", text_median(seen.prior_median).c_str(), seen.ratio,
                      absl::StrFormat("[%.2f, %.2f]", seen.ci.lo, seen.ci.hi).c_str(),
                      100 * prior_on(given_runs));
        std::printf("  %s\n", loo.verdict);
      }
    }
    if (!o.json) {
      std::printf("transfer, %s: helped on %d of %zu spaces, hurt on %d, no difference on %zu\n",
                  t.strategy.c_str(), helped, spaces.size(), hurt, spaces.size() - helped - hurt);
      std::printf(
          "prior-on: the share of runs whose prior got weight at some learning update (it gets "
          "none unless it ranks the first results picked without the models)\n");
      if (given)
        std::printf(
            "* the checkpoint as given, which may have been trained on the space itself: not a "
            "test of transfer\n");
    }
  }
  if (o.json) {
    nlohmann::ordered_json out = {{"results", std::move(results)},
                                  {"geomeans", std::move(geomeans)}};
    if (o.transfer) out["transfer"] = std::move(transfer);
    std::printf("%s\n", kiln::JsonText(out).c_str());
  }
  return 0;
}
