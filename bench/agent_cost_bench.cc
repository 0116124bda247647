// The search strategies' own cost per trial (Propose one configuration, Observe its result) as
// the space grows from 10^3 to 10^7 configurations, on Google Benchmark.
//
// A synthetic space of K knobs with 10 values each (10^K configurations, one constraint that
// rules out ~1/7 of them, as the templates' register-budget rules do) and a smooth landscape with
// a single optimum; each benchmark iteration is one trial. The strategy is built once per run and
// warmed up with `kWarmup` trials first, so the figure is the steady state a long job sees
// (model refits included at their natural rate), not construction.
//
//   build/bench/kiln-bench-agent-cost [--benchmark_filter=policy] [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <string>

#include "agent/strategy.h"
#include "codegen/knob_space.h"

namespace {

using kiln::codegen::Config;
using kiln::codegen::KnobSpace;

constexpr int kWarmup = 64;

KnobSpace SyntheticSpace(int knobs) {
  KnobSpace space;
  for (int k = 0; k < knobs; ++k)
    space.AddKnob("K" + std::to_string(k), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  space.AddConstraint("K0 + K1 != 7", [](const Config& c) { return c.at("K0") + c.at("K1") != 7; });
  return space;
}

// A smooth bowl around (3, 7, 3, 7, ...) in microseconds: every configuration is valid to time.
double Landscape(const Config& c) {
  double us = 100;
  int i = 0;
  for (const auto& [name, v] : c) {
    const double centre = (i++ % 2) ? 7 : 3;
    us += 4.0 * (v - centre) * (v - centre);
  }
  return us;
}

void Observe(kiln::agent::Strategy& s, const Config& c) {
  s.Observe({kiln::agent::Observation{c, kiln::v1::OK, Landscape(c)}});
}

void BM_TrialCost(benchmark::State& state, const std::string& strategy) {
  const int knobs = static_cast<int>(state.range(0));
  kiln::agent::StrategyContext ctx;
  ctx.space = SyntheticSpace(knobs);
  ctx.workload.set_op(kiln::v1::GEMM);
  ctx.chip.set_kind("replay");
  ctx.chip.set_chip_type("replay-synthetic");
  ctx.seed = 1;
  ctx.persist = false;
  auto made = kiln::agent::NewStrategy(strategy, std::move(ctx));
  if (!made.ok()) {
    state.SkipWithError(std::string(made.status().message()).c_str());
    return;
  }
  std::unique_ptr<kiln::agent::Strategy> s = std::move(*made);
  for (int i = 0; i < kWarmup; ++i) {
    auto c = s->Propose(1);
    if (c.empty()) break;
    Observe(*s, c[0]);
  }
  for (auto _ : state) {
    auto c = s->Propose(1);
    if (c.empty()) {
      state.SkipWithError("the space ran out of configurations");
      break;
    }
    Observe(*s, c[0]);
  }
  state.counters["configurations"] = std::pow(10.0, knobs);
  state.SetLabel(strategy);
}

}  // namespace

// 10^3 .. 10^7 configurations. Iterations are trials; a fixed count keeps the policy's periodic
// refits in proportion (one learning update every few trials) across space sizes.
BENCHMARK_CAPTURE(BM_TrialCost, policy, std::string("policy"))
    ->DenseRange(3, 7)
    ->Iterations(200)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrialCost, annealing, std::string("annealing"))
    ->DenseRange(3, 7)
    ->Iterations(500)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_TrialCost, evolution, std::string("evolution"))
    ->DenseRange(3, 7)
    ->Iterations(500)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_TrialCost, random, std::string("random"))
    ->DenseRange(3, 7)
    ->Iterations(500)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
