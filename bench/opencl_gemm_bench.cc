// kiln-bench-opencl-gemm: OpenCL GEMM M=64, N=K=4096 on the first OpenCL device (PoCL here):
// the template's default configuration against a seeded random search of the knob space and
// CLBlast. Prints the figures docs/benchmarks.md records; exits 1 when the best found is under
// 3x the default.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/flags.h"
#include "tests/hardware/accel_test_util.h"

namespace kiln::hardware {
namespace {

constexpr char kUsage[] =
    "usage: kiln-bench-opencl-gemm [--trials N] [--config KEY...] [--skip-default]\n"
    "--trials N: configurations of the random search (default 40)\n"
    "--config KEY...: measure these configurations (keys as the trial lines print them)\n"
    "             instead of a random search\n"
    "--skip-default: do not time the default configuration (exploration)\n";

int g_trials = 40;
bool g_skip_default = false;         // --skip-default (exploration)
std::vector<std::string> g_configs;  // --config KEY: measure these instead of a random search

codegen::Config ParseKey(const std::string& key) {
  codegen::Config c;
  size_t pos = 0;
  while (pos < key.size()) {
    size_t comma = key.find(',', pos), eq = key.find('=', pos);
    if (comma == std::string::npos) comma = key.size();
    c[key.substr(pos, eq - pos)] = std::atoll(key.substr(eq + 1, comma - eq - 1).c_str());
    pos = comma + 1;
  }
  return c;
}

MeasureOptions BenchOptions() {
  MeasureOptions o;  // the worker's: cold buffers, 2 warm-ups, CI-based stopping, 1 s cap
  o.max_seconds = 1.0;
  return o;
}

int Run() {
  auto device = OpenDevice("opencl");
  if (!device.ok()) {
    std::fprintf(stderr, "kiln-bench-opencl-gemm: %s\n", device.status().ToString().c_str());
    return 2;
  }
  Device& d = **device;
  const v1::Workload w = *codegen::ParseWorkload("gemm", "M=64,N=4096,K=4096");
  auto t = codegen::FindDeviceTemplate(w, "opencl");
  if (!t.ok()) {
    std::fprintf(stderr, "kiln-bench-opencl-gemm: %s\n", t.status().ToString().c_str());
    return 2;
  }
  const codegen::ChipTraits traits = codegen::TraitsFromFingerprint(d.Fingerprint());
  const codegen::Config def = (*t)->DefaultConfig(w, traits);
  std::printf("device %s (%s)\n", d.Fingerprint().chip_type().c_str(),
              d.Fingerprint().model().c_str());
  v1::Measurement base =
      g_skip_default ? v1::Measurement() : testing::RunConfig(d, **t, w, def, BenchOptions());
  if (g_skip_default) base.set_status(v1::OK), base.set_median_us(1);
  if (base.status() != v1::OK) {
    std::fprintf(stderr, "default configuration failed: %s\n", base.message().c_str());
    return 2;
  }
  std::printf("default  %-70s %10.0f us %7.2f GFLOP/s\n", codegen::ConfigKey(def).c_str(),
              base.median_us(), base.gflops());
  v1::Measurement blas = d.MeasureBaseline(w, BenchOptions());
  std::printf("baseline %-70s %10.0f us %7.2f GFLOP/s (%s)\n", d.BaselineName(w).c_str(),
              blas.median_us(), blas.gflops(), v1::MeasurementStatus_Name(blas.status()).c_str());
  double best_us = 0;
  codegen::Config best;
  const auto start = std::chrono::steady_clock::now();
  std::vector<codegen::Config> configs;
  for (const auto& key : g_configs) configs.push_back(ParseKey(key));
  if (configs.empty()) configs = testing::RandomConfigs((*t)->Space(w, traits), g_trials, 6);
  for (const auto& c : configs) {
    v1::Measurement m = testing::RunConfig(d, **t, w, c, BenchOptions());
    std::printf("trial    %-70s %10.0f us %7.2f GFLOP/s %s\n", codegen::ConfigKey(c).c_str(),
                m.median_us(), m.gflops(), v1::MeasurementStatus_Name(m.status()).c_str());
    if (m.status() == v1::OK && (best_us == 0 || m.median_us() < best_us))
      best_us = m.median_us(), best = c;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (best_us <= 0) {
    std::fprintf(stderr, "no configuration ran\n");
    return 2;
  }
  std::printf(
      "best of %zu %s configurations (%.0f s): %s %.0f us, %.2fx the default, "
      "%.2fx %s\n",
      configs.size(), g_configs.empty() ? "random" : "given", secs,
      codegen::ConfigKey(best).c_str(), best_us, base.median_us() / best_us,
      blas.median_us() / best_us, d.BaselineName(w).c_str());
  const bool met = base.median_us() / best_us >= 3.0;
  std::printf("target: tuned >= 3x the default: %s\n", met ? "met" : "NOT met");
  return met ? 0 : 1;
}

}  // namespace
}  // namespace kiln::hardware

int main(int argc, char** argv) {
  auto trials = [](const std::string& v) {
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || n < 1 || n > 100000)
      return "--trials: expected 1..100000, got '" + v + "'";
    kiln::hardware::g_trials = static_cast<int>(n);
    return std::string();
  };
  const std::vector<kiln::Flag> flags = {
      {"--trials", kiln::Flag::kValue, trials},
      {"--config", kiln::Flag::kList,
       [](const std::string& v) {
         kiln::hardware::g_configs.push_back(v);
         return std::string();
       }},
      {"--skip-default", kiln::Flag::kSwitch,
       [](const std::string&) {
         kiln::hardware::g_skip_default = true;
         return std::string();
       }},
  };
  if (auto error = kiln::ParseFlags(argc, argv, flags)) {
    std::fprintf(stderr, "kiln-bench-opencl-gemm: %s\n%s", error->message.c_str(),
                 error->refused ? "" : kiln::hardware::kUsage);
    return 2;
  }
  return kiln::hardware::Run();
}
