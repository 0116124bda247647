// Shared fixtures for coordinator tests: a temp SQLite store, a CPU fingerprint, job specs.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/v1/types.pb.h"
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

inline v1::Measurement Ok(double us) {
  v1::Measurement m;
  m.set_status(v1::OK);
  m.set_median_us(us);
  m.add_samples_us(us);
  return m;
}

}  // namespace kiln::server::testing
