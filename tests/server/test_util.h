// Shared fixtures for coordinator tests: a temp SQLite store, a CPU fingerprint, job specs.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "codegen/knob_space.h"
#include "kiln/v1/types.pb.h"
#include "kiln/v1/worker_service.pb.h"
#include "server/store/store.h"

namespace kiln::server::testing {

// Directories made by TempDir(), removed when the test program exits.
inline std::vector<std::string>& TempDirs() {
  static auto* dirs = [] {
    auto* v = new std::vector<std::string>();
    std::atexit([] {
      std::error_code ec;
      for (const auto& d : TempDirs()) std::filesystem::remove_all(d, ec);
    });
    return v;
  }();
  return *dirs;
}

inline std::string TempDir() {
  char tmpl[] = "/tmp/kiln-test-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  TempDirs().push_back(dir);
  return dir;
}

inline v1::ChipFingerprint CpuChip() {
  v1::ChipFingerprint c;
  c.set_kind("cpu");
  c.set_model("test cpu");
  c.set_chip_type("cpu-x86_64-avx2");
  c.set_cores(2);
  for (const char* f : {"avx", "avx2", "fma"}) c.add_isa_features(f);
  return c;
}

inline v1::JobSpec GemmSpec(int m, int budget) {
  v1::JobSpec s;
  s.mutable_workload()->set_op(v1::GEMM);
  s.mutable_workload()->set_dtype(v1::FP32);
  (*s.mutable_workload()->mutable_dims())["M"] = m;
  (*s.mutable_workload()->mutable_dims())["N"] = 64;
  (*s.mutable_workload()->mutable_dims())["K"] = 64;
  s.set_chip("cpu");
  s.set_budget_trials(budget);
  s.set_seed(42);
  return s;
}

// A decode job for mamba-130m (9 tasks) on the CPU, context 16.
inline v1::JobSpec MambaSpec(int budget) {
  v1::JobSpec s;
  s.set_model("mamba-130m");
  s.set_chip("cpu");
  s.set_budget_trials(budget);
  s.set_context(16);
  return s;
}

inline v1::Measurement Ok(double us) {
  v1::Measurement m;
  m.set_status(v1::OK);
  m.set_median_us(us);
  m.add_samples_us(us);
  return m;
}

// A worker's registration with the CPU fingerprint (`id` set when re-registering).
inline v1::RegisterRequest CpuRegistration(const std::string& id = "") {
  v1::RegisterRequest r;
  r.set_name("w");
  *r.mutable_chip() = CpuChip();
  r.set_worker_id(id);
  return r;
}

inline v1::LeaseTrialsRequest LeaseRequest(const std::string& worker, int n = 1) {
  v1::LeaseTrialsRequest r;
  r.set_worker_id(worker);
  r.set_max_trials(n);
  return r;
}

// The report of one trial's measurement, from `worker` at the trial's attempt.
inline v1::ReportResultsRequest ReportRequest(const std::string& worker, const v1::Trial& t,
                                              v1::Measurement m) {
  v1::ReportResultsRequest r;
  r.set_worker_id(worker);
  auto* res = r.add_results();
  res->set_trial_id(t.id());
  res->set_attempt(t.attempt());
  *res->mutable_measurement() = std::move(m);
  res->set_implementation(t.kind() == v1::BASELINE ? "openblas-sgemm" : "kiln");
  res->set_source_hash("hash-" + t.id());
  res->set_toolchain("c++ -O3 -march=native");
  return r;
}

// Names each trial's configuration by the order it was first seen: 0 (A), 1 (B), ...
class ConfigLetters {
 public:
  int operator()(const v1::Trial& t) {
    const std::string key = codegen::ConfigKey(codegen::FromProto(t.config()));
    auto it = std::find(seen_.begin(), seen_.end(), key);
    if (it != seen_.end()) return static_cast<int>(it - seen_.begin());
    seen_.push_back(key);
    return static_cast<int>(seen_.size()) - 1;
  }
  const std::vector<std::string>& keys() const { return seen_; }  // in letter order

 private:
  std::vector<std::string> seen_;
};

}  // namespace kiln::server::testing
