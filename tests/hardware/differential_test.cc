// The differential test table (DESIGN.md §10): every operator case on every accelerator backend
// present (opencl, cuda, sim), its default configuration and random valid ones, each compared
// with the double-precision reference. "not supported" and "skipped" are not failures.
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/hardware/accel_test_util.h"

namespace kiln::hardware {
namespace {

using testing::OperatorCases;
using testing::RandomConfigs;
using testing::RunConfig;

struct Backend {
  std::string spec;
  std::unique_ptr<Device> device;
  std::string skipped;  // why it is absent
};

std::vector<Backend>& Backends() {
  static auto* all = [] {
    auto* b = new std::vector<Backend>;
    for (const char* spec : {"opencl", "cuda", "sim:systolic-16x16-256kb"}) {
      auto d = OpenDevice(spec);
      b->push_back({spec, d.ok() ? std::move(*d) : nullptr,
                    d.ok() ? "" : std::string(d.status().message())});
    }
    return b;
  }();
  return *all;
}

TEST(DifferentialTest, EveryOperatorCaseOnEveryBackend) {
  std::map<std::string, int> tally;
  int measured = 0;
  for (Backend& b : Backends()) {
    if (!b.device) {
      std::printf("%-26s skipped: %s\n", b.spec.c_str(), b.skipped.c_str());
      ++tally["skipped"];
      continue;
    }
    const v1::ChipFingerprint& chip = b.device->Fingerprint();
    for (const v1::Workload& w : OperatorCases()) {
      const std::string key = codegen::WorkloadKey(w);
      if (!b.device->Supports(w)) {
        std::printf("%-26s %-44s not supported\n", chip.chip_type().c_str(), key.c_str());
        ++tally["not supported"];
        continue;
      }
      auto t = codegen::FindDeviceTemplate(w, chip.kind());
      ASSERT_TRUE(t.ok()) << t.status();
      const codegen::ChipTraits traits = codegen::TraitsFromFingerprint(chip);
      std::vector<codegen::Config> configs = {(*t)->DefaultConfig(w, traits)};
      for (auto& c : RandomConfigs((*t)->Space(w, traits), 2, std::hash<std::string>()(key)))
        configs.push_back(c);
      for (const codegen::Config& c : configs) {
        v1::Measurement m = RunConfig(*b.device, **t, w, c);
        ++measured;
        ++tally[v1::MeasurementStatus_Name(m.status())];
        std::printf("%-26s %-44s %-13s %9.1f us  max_err %.2g  %s\n", chip.chip_type().c_str(),
                    key.c_str(), v1::MeasurementStatus_Name(m.status()).c_str(), m.median_us(),
                    m.max_error(), codegen::ConfigKey(c).c_str());
        // A launch the device refuses (registers, local memory) is UNSUPPORTED, not a failure.
        EXPECT_TRUE(m.status() == v1::OK || m.status() == v1::UNSUPPORTED)
            << chip.chip_type() << " " << key << " " << codegen::ConfigKey(c) << ": "
            << v1::MeasurementStatus_Name(m.status()) << " " << m.message();
        if (c == configs.front()) {
          EXPECT_EQ(m.status(), v1::OK) << "the default configuration must run: " << m.message();
        }
      }
    }
  }
  for (const auto& [status, n] : tally) std::printf("%s: %d\n", status.c_str(), n);
  EXPECT_GT(measured, 0) << "no accelerator backend present (the sim backend always is)";
}

// The baselines (CLBlast / cuBLAS / default configurations / the default sim mapping) pass the
// same verification.
TEST(DifferentialTest, BaselinesVerify) {
  for (Backend& b : Backends()) {
    if (!b.device) continue;
    for (const v1::Workload& w : OperatorCases()) {
      if (!b.device->Supports(w)) continue;
      v1::Measurement m = b.device->MeasureBaseline(w, testing::QuickOptions());
      std::printf("%-26s %-44s baseline %-28s %s %.1f us\n",
                  b.device->Fingerprint().chip_type().c_str(), codegen::WorkloadKey(w).c_str(),
                  b.device->BaselineName(w).c_str(), v1::MeasurementStatus_Name(m.status()).c_str(),
                  m.median_us());
      EXPECT_EQ(m.status(), v1::OK)
          << b.device->BaselineName(w) << " on " << codegen::WorkloadKey(w) << ": " << m.message();
    }
  }
}

}  // namespace
}  // namespace kiln::hardware
