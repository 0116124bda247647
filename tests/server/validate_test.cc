// Input hardening: every string and map of a request is capped, and no error echoes more than a
// short prefix of what it refuses.
#include "server/validate.h"

#include <string>

#include "codegen/kernel_template.h"
#include "codegen/knob_constraints.h"
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
  EXPECT_TRUE(core.ListJobs(0)->empty());
  v1::LookupBestRequest lookup;
  *lookup.mutable_workload() = GemmSpec(8, 4).workload();
  lookup.set_chip_type(kHuge);
  ExpectRefused(core.LookupBest(lookup).status(), "chip_type: at most 128");
}

// pin, exclude and range are checked against the operator's knob space at submit, each refusal
// naming the field, the knob and the rule (the command line runs the same check first).
TEST(ValidateKnobConstraints, ValuesAreCheckedAgainstTheSpace) {
  auto with = [](void (*mutate)(v1::JobSpec*)) {
    v1::JobSpec spec = GemmSpec(8, 4);
    mutate(&spec);
    return ValidateJobSpec(spec);
  };
  EXPECT_TRUE(with([](v1::JobSpec* s) {
                (*s->mutable_pin())["MR"] = 4;
                (*s->mutable_exclude())["UNROLL"].add_values(1);
                (*s->mutable_range())["NR"].set_lo(8);
                (*s->mutable_range())["NR"].set_hi(32);
              }).ok());
  auto s = with([](v1::JobSpec* s) { (*s->mutable_pin())["MR"] = 7; });
  ExpectRefused(s, "pin: MR=7: MR takes 1, 2, 3, 4, 5, 6, 8, 12, 14 (gemm on cpu)");
  ExpectRefused(with([](v1::JobSpec* s) { (*s->mutable_exclude())["MR"].add_values(7); }),
                "exclude: MR=7: 7 is not a value; MR takes");
  ExpectRefused(with([](v1::JobSpec* s) {
                  (*s->mutable_exclude())["PACK"].add_values(0);
                  (*s->mutable_exclude())["PACK"].add_values(1);
                }),
                "exclude: PACK=0,1: leaves PACK no value");
  ExpectRefused(with([](v1::JobSpec* s) {
                  (*s->mutable_range())["MR"].set_lo(20);
                  (*s->mutable_range())["MR"].set_hi(30);
                }),
                "range: MR=20..30: no value lies in 20..30");
  ExpectRefused(with([](v1::JobSpec* s) { (*s->mutable_range())["NOPE"].set_hi(3); }),
                "range: NOPE=0..3: gemm on cpu has no knob NOPE");
  ExpectRefused(with([](v1::JobSpec* s) {
                  (*s->mutable_pin())["MR"] = 2;
                  (*s->mutable_range())["MR"].set_lo(4);
                  (*s->mutable_range())["MR"].set_hi(8);
                }),
                "pin: MR=2 lies outside range: MR=4..8");
  // Every value exists, but together they leave no configuration: the rule is named.
  ExpectRefused(with([](v1::JobSpec* s) {
                  (*s->mutable_pin())["MR"] = 8;
                  (*s->mutable_pin())["NR"] = 64;
                }),
                "no configuration of gemm on cpu satisfies them (MR*NR/");
  // A thread count is some chip's (one with 6 cores), where the shape has tiles for 6 threads.
  EXPECT_TRUE(with([](v1::JobSpec* s) {
                (*s->mutable_workload()->mutable_dims())["N"] = 4096;
                (*s->mutable_pin())["NT"] = 6;
              }).ok());
  ExpectRefused(with([](v1::JobSpec* s) { (*s->mutable_pin())["NT"] = 6; }),
                "no configuration of gemm on cpu satisfies them (NT <= tiles");
}

TEST(ValidateKnobConstraints, SizesAreCapped) {
  v1::JobSpec spec = GemmSpec(8, 4);
  for (int i = 0; i <= kMaxExcludedValues; ++i) (*spec.mutable_exclude())["MR"].add_values(i);
  ExpectRefused(ValidateJobSpec(spec), "exclude: at most 1024 values per knob");
  spec = GemmSpec(8, 4);
  for (int i = 0; i <= kMaxKnobs; ++i) (*spec.mutable_range())["K" + std::to_string(i)];
  ExpectRefused(ValidateJobSpec(spec), "range: at most 64 entries");
  spec = GemmSpec(8, 4);
  (*spec.mutable_exclude())[kHuge].add_values(1);
  ExpectRefused(ValidateJobSpec(spec), "exclude: at most 64 characters");
}

TEST(ValidateKnobConstraints, ModelJobsNeedEachKnobOnSomeOperator) {
  v1::JobSpec spec;
  spec.set_model("tinyllama-1.1b");
  spec.set_chip("cpu");
  (*spec.mutable_exclude())["NOPE"].add_values(1);
  ExpectRefused(ValidateJobSpec(spec), "exclude: no operator of the model has knob NOPE");
  spec.clear_exclude();
  (*spec.mutable_range())["NT"].set_lo(1);
  (*spec.mutable_range())["NT"].set_hi(4);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

// The search behind the "no configuration satisfies them" refusal and `kiln knobs`'s count
// agrees with plain enumeration, also for a rule that tests whether a knob is set (as the replay
// spaces' rule does) instead of reading it with Config::at.
TEST(ValidateKnobConstraints, SearchCountsAsEnumerationDoes) {
  codegen::KnobSpace s;
  s.AddKnob("A", {1, 2, 3, 4});
  s.AddKnob("B", {1, 2, 3});
  s.AddKnob("C", {0, 1});
  s.AddConstraint("A*B <= 6", [](const codegen::Config& c) { return c.at("A") * c.at("B") <= 6; });
  s.AddConstraint("C == 1 or A even", [](const codegen::Config& c) {
    auto it = c.find("C");
    return it != c.end() && (it->second == 1 || c.at("A") % 2 == 0);
  });
  EXPECT_EQ(codegen::CountValidConfigs(s), s.EnumerateValid().size());
  EXPECT_GT(s.EnumerateValid().size(), 0u);
  v1::JobSpec spec = GemmSpec(8, 4);  // narrowed, so that enumerating it is quick
  (*spec.mutable_pin())["UNROLL"] = 4;
  (*spec.mutable_pin())["PF"] = 0;
  (*spec.mutable_pin())["LOOP_ORDER"] = 0;
  auto gemm = codegen::SpaceFor(spec.workload(), CpuChip());
  ASSERT_TRUE(gemm.ok());
  ASSERT_TRUE(codegen::ApplyKnobConstraints(spec, false, &*gemm).ok());
  EXPECT_EQ(codegen::CountValidConfigs(*gemm, 1 << 22), gemm->EnumerateValid().size());
}

// Binding applies them to the chip's space; starting configurations and proposals obey them.
TEST(ValidateKnobConstraints, ApplyAndMeet) {
  v1::JobSpec spec = GemmSpec(8, 4);
  (*spec.mutable_exclude())["UNROLL"].add_values(1);
  (*spec.mutable_range())["MR"].set_lo(2);
  (*spec.mutable_range())["MR"].set_hi(4);
  auto space = codegen::SpaceFor(spec.workload(), CpuChip());
  ASSERT_TRUE(space.ok()) << space.status();
  ASSERT_TRUE(codegen::ApplyKnobConstraints(spec, false, &*space).ok());
  EXPECT_EQ(space->FindKnob("MR")->values, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(space->FindKnob("UNROLL")->values, (std::vector<int64_t>{2, 4, 8}));
  EXPECT_FALSE(space->EnumerateValid(1).empty());
  EXPECT_TRUE(codegen::MeetsKnobConstraints(spec, {{"MR", 2}, {"UNROLL", 4}}));
  EXPECT_FALSE(codegen::MeetsKnobConstraints(spec, {{"MR", 8}, {"UNROLL", 4}}));
  EXPECT_FALSE(codegen::MeetsKnobConstraints(spec, {{"MR", 2}, {"UNROLL", 1}}));
  (*spec.mutable_pin())["NOPE"] = 1;
  auto fresh = codegen::SpaceFor(spec.workload(), CpuChip());
  EXPECT_FALSE(codegen::ApplyKnobConstraints(spec, false, &*fresh).ok());
  EXPECT_TRUE(codegen::ApplyKnobConstraints(spec, true, &*fresh).ok());  // a model's other op
}

}  // namespace
}  // namespace kiln::server
