// Shared by the accelerator backend tests: operator cases, random valid configurations, and
// render + compile + measure of one configuration in-process.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "codegen/device_template.h"
#include "codegen/workload.h"
#include "hardware/device.h"

namespace kiln::hardware::testing {

// Small and ragged cases of every operator the accelerator templates cover, in
// codegen/workload.cc's dimension conventions.
inline std::vector<v1::Workload> OperatorCases() {
  const char* cases[][2] = {{"gemm", "M=1,N=64,K=64"},
                            {"gemm", "M=5,N=96,K=33"},
                            {"gemm", "M=64,N=128,K=256"},
                            {"rmsnorm", "T=1,D=4096"},
                            {"rmsnorm", "T=7,D=100"},
                            {"softmax", "T=3,N=1000"},
                            {"softmax", "T=5,N=7"},
                            {"swiglu", "T=3,F=100"},
                            {"swiglu", "T=2,F=11008"},
                            {"attention_decode", "B=1,H=8,KVH=2,D=64,L=100"},
                            {"attention_decode", "B=2,H=4,KVH=4,D=128,L=513"}};
  std::vector<v1::Workload> out;
  for (auto& c : cases) out.push_back(*codegen::ParseWorkload(c[0], c[1]));
  return out;
}

// Up to `n` distinct valid configurations drawn uniformly from the space (seeded).
inline std::vector<codegen::Config> RandomConfigs(const codegen::KnobSpace& space, int n,
                                                  uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<codegen::Config> out;
  for (int tries = 0; tries < 20000 && static_cast<int>(out.size()) < n; ++tries) {
    codegen::Config c = space.Decode(rng() % space.CartesianSize());
    if (!space.IsValid(c)) continue;
    bool seen = false;
    for (const auto& o : out) seen = seen || o == c;
    if (!seen) out.push_back(c);
  }
  return out;
}

inline MeasureOptions QuickOptions() {
  MeasureOptions o;
  o.warmup = 0;
  o.min_samples = 1;
  o.max_samples = 3;
  o.max_seconds = 0.05;
  o.warm = true;
  return o;
}

// Renders `config`, compiles and measures it on `device` in this process.
inline v1::Measurement RunConfig(Device& device, const codegen::KernelTemplate& t,
                                 const v1::Workload& w, const codegen::Config& config,
                                 const MeasureOptions& opts = QuickOptions()) {
  const codegen::ChipTraits traits = codegen::TraitsFromFingerprint(device.Fingerprint());
  v1::Measurement m;
  auto kernel = t.Render(w, config, traits);
  if (!kernel.ok()) {
    m.set_status(v1::COMPILE_ERROR);
    m.set_message("render: " + std::string(kernel.status().message()));
    return m;
  }
  auto compiled = device.Compile(*kernel);
  if (!compiled.ok()) {
    m.set_status(v1::COMPILE_ERROR);
    m.set_message(std::string(compiled.status().message()));
    return m;
  }
  return device.Measure(w, *compiled, opts);
}

}  // namespace kiln::hardware::testing
