// The differential test table (DESIGN.md §10): every operator of the operator table on every
// backend present (cpu, opencl, cuda, sim), its safe default configuration and random valid ones,
// each verified by the operator's one case (hardware/op_cases.h: the double-precision reference
// and its tolerance). "not supported" and "skipped" are not failures.
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "codegen/op_table.h"
#include "gtest/gtest.h"
#include "tests/hardware/accel_test_util.h"

namespace kiln::hardware {
namespace {

using testing::RandomConfigs;
using testing::RunConfig;

// The accelerators' cases, and small ragged ones of every other operator, dtype and epilogue the
// CPU runs.
std::vector<v1::Workload> DifferentialCases() {
  std::vector<v1::Workload> out = testing::OperatorCases();
  const char* more[][4] = {{"gemm", "M=3,N=77,K=65", "fp32", "bias"},
                           {"gemm", "M=2,N=64,K=31", "fp32", "gelu"},
                           // prefill-sized: the register-blocked kernel's tile epilogue
                           {"gemm", "M=67,N=77,K=65", "fp32", "residual"},
                           {"gemm", "M=64,N=45,K=300", "fp32", "bias"},
                           {"gemm", "M=9,N=95,K=67", "bf16", "residual"},
                           {"gemm", "M=3,N=77,K=64", "int8", "silu"},
                           {"gemm", "M=5,N=130,K=96", "int4", ""},
                           {"rmsnorm", "T=3,D=77", "fp32", "residual"},
                           {"rope", "T=3,H=5,D=18", "fp32", ""},
                           {"attention_prefill", "B=2,H=3,KVH=1,D=12,S=29", "fp32", ""},
                           {"moe_router", "T=5,D=37,E=7,TOPK=3", "fp32", ""},
                           {"moe_gemm", "T=3,E=5,TOPK=2,N=33,K=20", "fp32", ""},
                           {"moe_gemm", "T=3,E=5,TOPK=2,N=33,K=20", "bf16", ""},
                           {"moe_gemm", "T=3,E=5,TOPK=2,N=33,K=64", "int8", ""},
                           {"moe_gemm", "T=4,E=3,TOPK=2,N=40,K=32", "int4", ""},
                           {"ssm_scan", "B=2,T=3,D=17,S=16", "fp32", ""},
                           {"conv1d", "B=2,T=5,D=19,W=4", "fp32", ""}};
  for (auto& c : more) {
    auto w = codegen::ParseWorkload(c[0], c[1], c[2]);
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) continue;
    w->set_epilogue(c[3]);
    out.push_back(*w);
  }
  return out;
}

// Adding an operator to the table without a differential case fails here.
TEST(DifferentialTest, EveryOperatorOfTheTableHasACase) {
  std::set<v1::OpKind> covered;
  for (const v1::Workload& w : DifferentialCases()) covered.insert(w.op());
  for (const codegen::Operator& op : codegen::Operators())
    EXPECT_TRUE(covered.count(op.kind)) << codegen::OpName(op.kind) << " has no differential case";
}

struct Backend {
  std::string spec;
  std::unique_ptr<Device> device;
  std::string skipped;  // why it is absent
};

std::vector<Backend>& Backends() {
  static auto* all = [] {
    auto* b = new std::vector<Backend>;
    for (const char* spec : {"cpu", "opencl", "cuda", "sim:systolic-16x16-256kb"}) {
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
    for (const v1::Workload& w : DifferentialCases()) {
      const std::string key = codegen::WorkloadKey(w);
      if (!b.device->Supports(w)) {
        std::printf("%-26s %-44s not supported\n", chip.chip_type().c_str(), key.c_str());
        ++tally["not supported"];
        continue;
      }
      auto t = codegen::FindTemplate(w, chip.kind());
      ASSERT_TRUE(t.ok()) << t.status();
      const codegen::ChipTraits traits = codegen::TraitsFromFingerprint(chip);
      const codegen::KnobSpace space = (*t)->Space(w, traits);
      std::vector<codegen::Config> configs = {codegen::SafeDefaultConfig(space)};
      // One random configuration on the CPU (each is a compile of a shared object), two elsewhere.
      const int random = chip.kind() == "cpu" ? 1 : 2;
      for (auto& c : RandomConfigs(space, random, std::hash<std::string>()(key)))
        if (!(c == configs.front())) configs.push_back(c);
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

// The baselines (every CPU route, CLBlast / cuBLAS / default configurations / the default sim
// mapping) pass the same verification.
TEST(DifferentialTest, BaselinesVerify) {
  for (Backend& b : Backends()) {
    if (!b.device) continue;
    for (const v1::Workload& w : DifferentialCases()) {
      if (!b.device->Supports(w)) continue;
      v1::Measurement m = b.device->MeasureBaseline(w, testing::QuickOptions());
      std::printf("%-26s %-44s baseline %-28s %s %.1f us\n",
                  b.device->Fingerprint().chip_type().c_str(), codegen::WorkloadKey(w).c_str(),
                  b.device->BaselineName(w).c_str(), v1::MeasurementStatus_Name(m.status()).c_str(),
                  m.median_us());
      EXPECT_EQ(m.status(), v1::OK)
          << b.device->BaselineName(w) << " on " << codegen::WorkloadKey(w) << ": " << m.message();
      // Every route the fastest was chosen from verified too (or cannot run here).
      for (const v1::BaselineRoute& r : m.baseline_routes())
        EXPECT_TRUE(r.status() == v1::OK || r.status() == v1::UNSUPPORTED)
            << r.name() << " at " << r.threads() << " threads on " << codegen::WorkloadKey(w)
            << ": " << v1::MeasurementStatus_Name(r.status()) << " " << r.message();
    }
  }
}

}  // namespace
}  // namespace kiln::hardware
