// kiln-bench-search: compares search strategies on replayed measurement sets (DESIGN.md §6).
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/strategy.h"
#include "bench/search_eval.h"

namespace {

constexpr char kUsage[] =
    "usage: kiln-bench-search --space FILE... --strategy NAME... [--seeds N] [--budget B]\n"
    "                         [--json] [--jobs N] [--verbose]\n"
    "  Runs every strategy N times (seeds 1..N) on every replay set and prints, per space and\n"
    "  strategy, the median trials to reach 95% of the best configuration's performance, the\n"
    "  share of runs reaching it within B trials, random search's exact expectation, their\n"
    "  ratio, and the score (strategy - random) / (optimum - random) at 10% and 25% of B.\n"
    "  --strategy default means whatever jobs use by default; NAME:CHECKPOINT warm-starts a\n"
    "  learning strategy. --verbose lists every run's trials to 95% on stderr.\n"
    "  Defaults: --seeds 20 --budget 1000 --jobs <cores>.\n";

struct Options {
  std::vector<std::string> spaces, strategies;
  int seeds = 20, budget = 1000, jobs = 0;
  bool json = false, verbose = false;
};

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

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string>* list = nullptr;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--json" || a == "--verbose") {
      (a == "--json" ? o.json : o.verbose) = true;
      list = nullptr;
    } else if (a == "--space") {
      list = &o.spaces;
    } else if (a == "--strategy") {
      list = &o.strategies;
    } else if (a == "--seeds" || a == "--budget" || a == "--jobs") {
      if (i + 1 >= argc) return Fail(a + " needs a value");
      int* dst = a == "--seeds" ? &o.seeds : a == "--budget" ? &o.budget : &o.jobs;
      if (!ParseInt(argv[++i], 1, dst)) return Fail(a + " must be a positive integer");
      list = nullptr;
    } else if (a.rfind("--", 0) == 0) {
      return Fail("unknown flag " + a);
    } else if (list) {
      list->push_back(a);
    } else {
      return Fail("unexpected argument " + a);
    }
  }
  if (o.spaces.empty()) return Fail("--space needs at least one file");
  if (o.strategies.empty()) return Fail("--strategy needs at least one name");
  for (const auto& s : o.strategies)
    if (auto st = kiln::agent::CheckStrategyName(s); !st.ok())
      return Fail(std::string(st.message()));
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
  // Every (space, strategy, seed) run is independent: spread them over `jobs` threads.
  const size_t per_space = o.strategies.size() * o.seeds;
  std::vector<kiln::bench::Trace> traces(spaces.size() * per_space);
  std::vector<std::string> errors(traces.size());
  std::atomic<size_t> next{0};
  const int keep_going = (o.budget + 3) / 4;
  auto work = [&] {
    for (size_t i; (i = next++) < traces.size();) {
      const auto& space = spaces[i / per_space];
      const std::string& strategy = o.strategies[(i % per_space) / o.seeds];
      uint64_t seed = 1 + i % o.seeds;
      auto t = kiln::bench::RunOnce(space, strategy, seed, o.budget, keep_going);
      if (t.ok())
        traces[i] = std::move(*t);
      else
        errors[i] = std::string(t.status().message());
    }
  };
  std::vector<std::thread> pool;
  for (int j = 0; j < o.jobs; ++j) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (!e.empty()) {
      std::fprintf(stderr, "kiln-bench-search: %s\n", e.c_str());
      return 1;
    }

  if (o.verbose)
    for (size_t i = 0; i < traces.size(); ++i)
      std::fprintf(stderr, "run %s %s seed %zu: trials to 95%% %d\n",
                   spaces[i / per_space].set->name.c_str(),
                   o.strategies[(i % per_space) / o.seeds].c_str(), 1 + i % o.seeds,
                   traces[i].trials_to_target);
  std::string json = "{\"results\": [";
  if (!o.json)
    std::printf("%-28s %-16s %10s %8s %10s %7s %8s %8s %9s\n", "space", "strategy", "median95",
                "reached", "random", "ratio", "score10", "score25", "ms/trial");
  for (size_t si = 0; si < spaces.size(); ++si) {
    const auto& space = spaces[si];
    double random = kiln::bench::RandomExpectedTrials(space.sorted_us.size(), space.good);
    for (size_t k = 0; k < o.strategies.size(); ++k) {
      std::vector<kiln::bench::Trace> runs(traces.begin() + si * per_space + k * o.seeds,
                                           traces.begin() + si * per_space + (k + 1) * o.seeds);
      auto s = kiln::bench::Summarize(space, runs, o.budget);
      const std::string& name = o.strategies[k];
      bool is_default = name == "default" || name == kiln::agent::kDefaultStrategy;
      double ratio = random / (s.median_trials > 0 ? s.median_trials : o.budget);
      if (o.json) {
        if (si + k > 0) json += ", ";
        json += absl::StrFormat(
            "{\"space\": %s, \"strategy\": %s, \"resolved_strategy\": %s, \"is_default\": %s, "
            "\"median_trials_to_95\": %s, \"reached_share\": %.4f, "
            "\"random_expected_trials_to_95\": %.2f, \"ratio\": %.3f, \"score_10\": %.4f, "
            "\"score_25\": %.4f, \"agent_ms_per_trial\": %.4f, \"configs\": %d, \"good\": %d}",
            JsonString(space.path), JsonString(name),
            JsonString(name == "default" ? kiln::agent::kDefaultStrategy : name),
            is_default ? "true" : "false",
            s.median_trials > 0 ? absl::StrFormat("%g", s.median_trials) : "null", s.reached_share,
            random, ratio, s.score_10, s.score_25, s.agent_ms_per_trial,
            static_cast<int>(space.sorted_us.size()), space.good);
      } else {
        std::string stem = space.set->name;
        std::printf(
            "%-28s %-16s %10s %7.0f%% %10.1f %7.1f %8.3f %8.3f %9.3f\n", stem.c_str(), name.c_str(),
            s.median_trials > 0 ? absl::StrFormat("%g", s.median_trials).c_str() : ">budget",
            100 * s.reached_share, random, ratio, s.score_10, s.score_25, s.agent_ms_per_trial);
      }
    }
  }
  if (o.json) std::printf("%s]}\n", json.c_str());
  return 0;
}
