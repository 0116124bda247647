// Input hardening: every string and map of a request is capped, and no error echoes more than a
// short prefix of what it refuses.
#include "server/validate.h"

#include <string>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"
#include "tests/server/test_util.h"

namespace kiln::server {
namespace {

using testing::CpuChip;
using testing::GemmSpec;
using ::testing::HasSubstr;

const std::string kHuge(10000, 'x');

// INVALID_ARGUMENT naming `field`, with a message far shorter than the input.
void ExpectRefused(const absl::Status& s, const std::string& field) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(field)) << s;
  EXPECT_LT(s.message().size(), 300u) << "the message echoes the input: " << s.message().size();
}

TEST(ValidateLimits, EveryJobSpecStringIsCapped) {
  struct Case {
    const char* field;
    void (*mutate)(v1::JobSpec*);
  };
  const Case cases[] = {
      {"chip: at most 128", [](v1::JobSpec* s) { s->set_chip("cpu" + kHuge); }},
      {"model: at most 128", [](v1::JobSpec* s) { s->set_model(kHuge); }},
      {"strategy: at most 256", [](v1::JobSpec* s) { s->set_strategy(kHuge); }},
      {"phase: at most 64", [](v1::JobSpec* s) { s->set_phase(kHuge); }},
      {"pin: at most 64", [](v1::JobSpec* s) { (*s->mutable_pin())[kHuge] = 1; }},
      {"pin: at most 64 entries",
       [](v1::JobSpec* s) {
         for (int i = 0; i < 65; ++i) (*s->mutable_pin())["K" + std::to_string(i)] = 1;
       }},
      {"workload.dims: at most 64",
       [](v1::JobSpec* s) { (*s->mutable_workload()->mutable_dims())[kHuge] = 1; }},
      {"workload.dims: at most 16 entries",
       [](v1::JobSpec* s) {
         for (int i = 0; i < 17; ++i)
           (*s->mutable_workload()->mutable_dims())[std::to_string(i)] = 1;
       }},
      {"workload.epilogue: at most 64",
       [](v1::JobSpec* s) { s->mutable_workload()->set_epilogue(kHuge); }},
      {"strategy: control characters", [](v1::JobSpec* s) { s->set_strategy("random\n\x1b[2J"); }},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = GemmSpec(8, 4);
    c.mutate(&spec);
    ExpectRefused(ValidateJobSpec(spec), c.field);
  }
  v1::JobSpec model;
  model.set_chip("cpu");
  model.set_hf_config_json(std::string(kMaxHfConfigBytes + 1, ' '));
  ExpectRefused(ValidateJobSpec(model), "hf_config_json: at most 1048576 bytes");
  // At the caps, the sizes themselves are fine (the rest of the rules still apply).
  v1::JobSpec ok = GemmSpec(8, 4);
  ok.set_chip("cpu" + std::string(kMaxChipLabelChars - 3, 'a'));
  EXPECT_TRUE(CheckJobSpecSizes(ok).ok());
}

TEST(ValidateLimits, ErrorsQuoteAShortPrefix) {
  v1::JobSpec spec = GemmSpec(8, 4);
  spec.set_chip("CPU" + std::string(100, 'x'));  // within the cap, bad characters
  auto s = ValidateJobSpec(spec);
  ExpectRefused(s, "chip:");
  EXPECT_THAT(std::string(s.message()), HasSubstr("'CPU" + std::string(37, 'x') + "...'"));
  ExpectRefused(ValidateJobId(kHuge), "job_id");
  ExpectRefused(ValidateWorkerId(kHuge), "worker_id");
  spec = GemmSpec(8, 4);
  spec.set_strategy(std::string(200, 'q'));  // within the cap: an unknown strategy
  ExpectRefused(ValidateJobSpec(spec), "strategy: unknown strategy");
}

TEST(ValidateLimits, RegisterCapsTheNameAndEveryFingerprintString) {
  struct Case {
    const char* field;
    void (*mutate)(v1::RegisterRequest*);
  };
  const Case cases[] = {
      {"name: at most 128", [](v1::RegisterRequest* r) { r->set_name(kHuge); }},
      {"name: control characters", [](v1::RegisterRequest* r) { r->set_name("a\nb"); }},
      {"chip.chip_type: at most 128",
       [](v1::RegisterRequest* r) { r->mutable_chip()->set_chip_type("cpu-" + kHuge); }},
      {"chip.kind: at most 128",
       [](v1::RegisterRequest* r) { r->mutable_chip()->set_kind(kHuge); }},
      {"chip.vendor: at most 128",
       [](v1::RegisterRequest* r) { r->mutable_chip()->set_vendor(kHuge); }},
      {"chip.model: at most 256",
       [](v1::RegisterRequest* r) { r->mutable_chip()->set_model(kHuge); }},
      {"chip.model: control characters",
       [](v1::RegisterRequest* r) {
         r->mutable_chip()->set_model("x\n__attribute__((constructor)) void f(){}");
       }},
      {"chip.compiler: at most 256",
       [](v1::RegisterRequest* r) { r->mutable_chip()->set_compiler(kHuge); }},
      {"chip.hostname: at most 256",
       [](v1::RegisterRequest* r) { r->mutable_chip()->set_hostname(kHuge); }},
      {"chip.isa_features: at most 64",
       [](v1::RegisterRequest* r) { r->mutable_chip()->add_isa_features(kHuge); }},
      {"chip.isa_features: at most 1024 entries",
       [](v1::RegisterRequest* r) {
         for (int i = 0; i < 1025; ++i) r->mutable_chip()->add_isa_features("f");
       }},
      {"chip.replay_knobs.name: at most 64",
       [](v1::RegisterRequest* r) { r->mutable_chip()->add_replay_knobs()->set_name(kHuge); }},
  };
  for (const Case& c : cases) {
    v1::RegisterRequest r;
    r.set_name("w");
    *r.mutable_chip() = CpuChip();
    c.mutate(&r);
    ExpectRefused(ValidateRegisterRequest(r), c.field);
  }
}

// Through the core: nothing oversized is stored, so it never reaches `kiln jobs`, `kiln workers`
// or a metrics label.
TEST(ValidateLimits, TheCoordinatorStoresNothingOversized) {
  auto store = *OpenStore("", testing::TempDir());
  FakeClock clock;
  Coordinator core(store.get(), &clock, nullptr, CoreOptions{5000, 1000, 1000, 1});
  ASSERT_TRUE(core.Recover().ok());
  v1::RegisterRequest r;
  r.set_name(std::string(30 << 20, 'n'));  // the 30 MB name of the report
  *r.mutable_chip() = CpuChip();
  ExpectRefused(core.Register(r, "").status(), "name");
  r.set_name("w");
  r.mutable_chip()->set_chip_type(std::string(1 << 20, 'c'));
  ExpectRefused(core.Register(r, "").status(), "chip.chip_type");
  EXPECT_TRUE(core.ListWorkers().empty());
  v1::JobSpec spec = GemmSpec(8, 4);
  spec.set_chip("cpu" + std::string(35 << 20, 'x'));  // the 35 MB --chip
  ExpectRefused(core.SubmitJob(spec).status(), "chip");
  EXPECT_TRUE(core.ListJobs(0).empty());
  v1::LookupBestRequest lookup;
  *lookup.mutable_workload() = GemmSpec(8, 4).workload();
  lookup.set_chip_type(kHuge);
  ExpectRefused(core.LookupBest(lookup).status(), "chip_type: at most 128");
}

}  // namespace
}  // namespace kiln::server
