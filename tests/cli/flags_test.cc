// Tests of the kiln command-line parser: commands, global flags and JOB-FLAGS.
#include "cli/flags.h"

#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::cli {
namespace {

using ::testing::HasSubstr;

absl::Status Parse(std::vector<std::string> args, Invocation* inv, const char* env = nullptr) {
  return ParseCommandLine(args, env, inv);
}

std::string Error(std::vector<std::string> args, const char* env = nullptr) {
  Invocation inv;
  absl::Status s = Parse(args, &inv, env);
  EXPECT_FALSE(s.ok()) << "accepted: " << testing::PrintToString(args);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.message());
}

const std::vector<std::string> kGemm = {"--op",   "gemm", "--shape", "M=8,N=4096,K=4096",
                                        "--chip", "cpu"};

std::vector<std::string> Submit(std::vector<std::string> extra) {
  std::vector<std::string> args = {"submit"};
  args.insert(args.end(), kGemm.begin(), kGemm.end());
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(FlagsTest, SubmitBuildsTheJobSpecWithDefaults) {
  Invocation inv;
  ASSERT_TRUE(Parse(Submit({}), &inv).ok());
  EXPECT_EQ(inv.command, "submit");
  EXPECT_EQ(inv.coordinator, "127.0.0.1:50051");
  EXPECT_FALSE(inv.wait);
  EXPECT_FALSE(inv.json);
  const v1::JobSpec& spec = inv.spec;
  EXPECT_EQ(spec.workload().op(), v1::GEMM);
  EXPECT_EQ(spec.workload().dtype(), v1::FP32);
  EXPECT_EQ(spec.workload().dims().at("M"), 8);
  EXPECT_EQ(spec.workload().dims().at("K"), 4096);
  EXPECT_EQ(spec.chip(), "cpu");
  EXPECT_EQ(spec.budget_trials(), 64);
  EXPECT_EQ(spec.strategy(), "");
  EXPECT_EQ(spec.seed(), 0u);
  EXPECT_EQ(spec.max_seconds(), 0);
  EXPECT_TRUE(spec.model().empty());
}

TEST(FlagsTest, AllJobFlagsAndEqualsForm) {
  Invocation inv;
  ASSERT_TRUE(Parse(Submit({"--budget=200", "--max-seconds", "90.5", "--strategy", "policy",
                            "--seed", "18446744073709551615", "--priority", "-3", "--pin", "MR=8",
                            "--pin=NR=16", "--wait", "--json", "--dtype", "fp32"}),
                    &inv)
                  .ok());
  EXPECT_TRUE(inv.wait);
  EXPECT_TRUE(inv.json);
  EXPECT_EQ(inv.spec.budget_trials(), 200);
  EXPECT_DOUBLE_EQ(inv.spec.max_seconds(), 90.5);
  EXPECT_EQ(inv.spec.strategy(), "policy");
  EXPECT_EQ(inv.spec.seed(), 18446744073709551615ull);
  EXPECT_EQ(inv.spec.priority(), -3);
  EXPECT_EQ(inv.spec.pin().at("MR"), 8);
  EXPECT_EQ(inv.spec.pin().at("NR"), 16);
}

TEST(FlagsTest, EpilogueOfAnOperatorJob) {
  Invocation inv;
  ASSERT_TRUE(Parse(Submit({"--epilogue", "residual"}), &inv).ok());
  EXPECT_EQ(inv.spec.workload().epilogue(), "residual");
  EXPECT_THAT(Error(Submit({"--epilogue", "relu6"})), HasSubstr("'relu6' is not an epilogue"));
  EXPECT_THAT(Error({"submit", "--model", "tinyllama-1.1b", "--chip", "cpu", "--epilogue", "bias"}),
              HasSubstr("--epilogue applies to --op jobs"));
}

TEST(FlagsTest, GlobalFlagsBeforeOrAfterTheCommand) {
  Invocation before, after;
  ASSERT_TRUE(Parse({"--coordinator", "10.0.0.5:6000", "jobs"}, &before).ok());
  ASSERT_TRUE(Parse({"jobs", "--coordinator=10.0.0.5:6000"}, &after).ok());
  EXPECT_EQ(before.coordinator, "10.0.0.5:6000");
  EXPECT_EQ(after.coordinator, "10.0.0.5:6000");
  EXPECT_EQ(before.command, "jobs");
}

TEST(FlagsTest, CoordinatorFromEnvironmentUnlessFlagGiven) {
  Invocation env, flag;
  ASSERT_TRUE(Parse({"workers"}, &env, "host:7000").ok());
  EXPECT_EQ(env.coordinator, "host:7000");
  ASSERT_TRUE(Parse({"workers", "--coordinator", "other:1"}, &flag, "host:7000").ok());
  EXPECT_EQ(flag.coordinator, "other:1");
  EXPECT_THAT(Error({"workers"}, "nonsense"), HasSubstr("KILN_COORDINATOR"));
  EXPECT_THAT(Error({"workers", "--coordinator", "h:99999"}), HasSubstr("--coordinator"));
}

TEST(FlagsTest, JobCommandsTakeOneJobId) {
  for (const char* cmd : {"watch", "results", "cancel"}) {
    Invocation inv;
    ASSERT_TRUE(Parse({cmd, "job-1"}, &inv).ok()) << cmd;
    EXPECT_EQ(inv.job_id, "job-1");
    EXPECT_THAT(Error({cmd}), HasSubstr("missing JOB"));
    EXPECT_THAT(Error({cmd, "a", "b"}), HasSubstr("unexpected argument 'b'"));
  }
  Invocation inv;
  ASSERT_TRUE(Parse({"results", "--json", "j"}, &inv).ok());
  EXPECT_TRUE(inv.json);
  EXPECT_THAT(Error({"jobs", "extra"}), HasSubstr("unexpected argument 'extra'"));
}

TEST(FlagsTest, HelpAndVersion) {
  Invocation a, b, c, d;
  ASSERT_TRUE(Parse({"--version"}, &a).ok());
  EXPECT_TRUE(a.version);
  ASSERT_TRUE(Parse({"submit", "--help"}, &b).ok());  // no JOB-FLAGS needed for help
  EXPECT_TRUE(b.help);
  EXPECT_EQ(b.command, "submit");
  ASSERT_TRUE(Parse({"help", "results"}, &c).ok());
  EXPECT_TRUE(c.help);
  EXPECT_EQ(c.help_topic, "results");
  ASSERT_TRUE(Parse({"-h"}, &d).ok());
  EXPECT_TRUE(d.help);
}

TEST(FlagsTest, UsageErrorsNameTheFlag) {
  EXPECT_THAT(Error({}), HasSubstr("missing command"));
  EXPECT_THAT(Error({"frobnicate"}), HasSubstr("unknown command 'frobnicate'"));
  EXPECT_THAT(Error(Submit({"--frob"})), HasSubstr("unknown flag --frob"));
  EXPECT_THAT(Error(Submit({"-x"})), HasSubstr("unknown flag -x"));
  EXPECT_THAT(Error({"jobs", "--wait"}), HasSubstr("--wait does not apply to 'kiln jobs'"));
  EXPECT_THAT(Error({"submit", "--op", "gemm", "--shape", "M=1,N=1,K=1"}),
              HasSubstr("missing --chip"));
  EXPECT_THAT(Error({"submit", "--chip", "cpu"}), HasSubstr("missing --op and --shape"));
  EXPECT_THAT(Error({"submit", "--chip", "cpu", "--op", "gemm"}), HasSubstr("missing --shape"));
  EXPECT_THAT(Error({"submit", "--chip", "cpu", "--shape", "M=1"}), HasSubstr("missing --op"));
  EXPECT_THAT(Error(Submit({"--budget", "0"})), HasSubstr("--budget"));
  EXPECT_THAT(Error(Submit({"--budget", "ten"})), HasSubstr("--budget"));
  EXPECT_THAT(Error(Submit({"--max-seconds", "-1"})), HasSubstr("--max-seconds"));
  EXPECT_THAT(Error(Submit({"--max-seconds", "inf"})), HasSubstr("--max-seconds"));
  EXPECT_THAT(Error(Submit({"--seed", "-1"})), HasSubstr("--seed"));
  EXPECT_THAT(Error(Submit({"--priority", "1.5"})), HasSubstr("--priority"));
  EXPECT_THAT(Error(Submit({"--pin", "MR"})), HasSubstr("--pin"));
  EXPECT_THAT(Error(Submit({"--pin", "MR=x"})), HasSubstr("--pin"));
  EXPECT_THAT(Error(Submit({"--pin", "MR=8", "--pin", "MR=4"})), HasSubstr("pinned twice"));
  EXPECT_THAT(Error(Submit({"--budget", "5", "--budget", "6"})), HasSubstr("more than once"));
  EXPECT_THAT(Error(Submit({"--strategy"})), HasSubstr("--strategy needs a value"));
  EXPECT_THAT(Error({"submit", "--op", "--shape", "M=1"}), HasSubstr("--op needs a value"));
  EXPECT_THAT(Error(Submit({"--wait=yes"})), HasSubstr("--wait takes no value"));
  EXPECT_THAT(Error(Submit({"--batch", "4"})), HasSubstr("--batch applies to model jobs"));
  EXPECT_THAT(Error(Submit({"--model", "llama"})), HasSubstr("exclusive"));
}

TEST(FlagsTest, WorkloadErrorsComeFromTheValidator) {
  EXPECT_EQ(Error({"submit", "--op", "gemm", "--shape", "M=0,N=4096,K=4096", "--chip", "cpu"}),
            "INVALID_ARGUMENT: shape: M=0 is out of range; M must be in 1..1048576");
  EXPECT_THAT(Error({"submit", "--op", "nope", "--shape", "M=1", "--chip", "cpu"}),
              HasSubstr("unknown operator 'nope'"));
  EXPECT_THAT(Error(Submit({"--dtype", "fp64"})), HasSubstr("dtype"));
}

TEST(FlagsTest, ModelJobs) {
  Invocation inv;
  ASSERT_TRUE(Parse({"submit", "--model", "llama-3-8b", "--phase", "decode", "--batch", "1",
                     "--context", "2048", "--chip", "cpu"},
                    &inv)
                  .ok());
  EXPECT_EQ(inv.spec.model(), "llama-3-8b");
  EXPECT_FALSE(inv.spec.has_workload());
  EXPECT_EQ(inv.phase, "decode");
  EXPECT_EQ(inv.batch, 1);
  EXPECT_EQ(inv.context, 2048);
  EXPECT_EQ(inv.spec.phase(), "decode");
  EXPECT_EQ(inv.spec.batch(), 1);
  EXPECT_EQ(inv.spec.context(), 2048);
  EXPECT_FALSE(inv.spec.no_step_probe());  // the probe step is on by default
  Invocation plain;
  ASSERT_TRUE(
      Parse({"submit", "--model", "tinyllama-1.1b", "--chip", "cpu", "--no-step-probe"}, &plain)
          .ok());
  EXPECT_TRUE(plain.spec.no_step_probe());
  EXPECT_THAT(Error(Submit({"--no-step-probe"})),
              HasSubstr("--no-step-probe applies to model jobs"));
  EXPECT_THAT(Error({"submit", "--model", "m", "--chip", "cpu", "--phase", "train"}),
              HasSubstr("--phase"));
  EXPECT_THAT(Error({"submit", "--model", "m", "--chip", "cpu", "--context", "0"}),
              HasSubstr("--context"));

  std::string path = testing::TempDir() + "/kiln_flags_config.json";
  std::ofstream(path) << "{\"hidden_size\": 4096}";
  Invocation hf;
  ASSERT_TRUE(Parse({"submit", "--hf-config", path, "--chip", "cpu"}, &hf).ok());
  EXPECT_TRUE(hf.spec.model().empty());
  EXPECT_EQ(hf.spec.hf_config_json(), "{\"hidden_size\": 4096}");  // the text, not the path
  std::remove(path.c_str());
  EXPECT_THAT(Error({"submit", "--hf-config", "/nonexistent/config.json", "--chip", "cpu"}),
              HasSubstr("--hf-config: cannot read '/nonexistent/config.json'"));
}

// --hf-config reads regular files only, up to 1 MiB: /dev/zero, a FIFO or a directory would
// read forever, block, or fail obscurely.
TEST(FlagsTest, HfConfigReadsOnlyRegularFilesOfBoundedSize) {
  EXPECT_THAT(Error({"submit", "--hf-config", "/dev/zero", "--chip", "cpu"}),
              HasSubstr("--hf-config: '/dev/zero' is not a regular file"));
  EXPECT_THAT(Error({"submit", "--hf-config", "/tmp", "--chip", "cpu"}),
              HasSubstr("is not a regular file"));
  const std::string fifo = ::testing::TempDir() + "/kiln-hf-fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(Error({"submit", "--hf-config", fifo, "--chip", "cpu"}),
              HasSubstr("is not a regular file"));
  std::remove(fifo.c_str());
  const std::string big = ::testing::TempDir() + "/kiln-hf-big.json";
  std::ofstream(big) << std::string(kMaxHfConfigFileBytes + 1, ' ');
  EXPECT_THAT(Error({"submit", "--hf-config", big, "--chip", "cpu"}),
              HasSubstr("bytes; a config.json is at most 1048576 (1 MiB)"));
  std::remove(big.c_str());
  // A path too long to echo whole is quoted in part.
  EXPECT_LT(
      Error({"submit", "--hf-config", "/nonexistent/" + std::string(5000, 'p'), "--chip", "cpu"})
          .size(),
      600u);
}

TEST(FlagsTest, TuneNeedsLocalAndTakesDataDir) {
  std::vector<std::string> args = {"tune", "--local", "--data-dir", "/tmp/kd"};
  args.insert(args.end(), kGemm.begin(), kGemm.end());
  Invocation inv;
  ASSERT_TRUE(Parse(args, &inv).ok());
  EXPECT_TRUE(inv.local);
  EXPECT_EQ(inv.data_dir, "/tmp/kd");
  EXPECT_EQ(inv.spec.chip(), "cpu");
  std::vector<std::string> no_local = {"tune"};
  no_local.insert(no_local.end(), kGemm.begin(), kGemm.end());
  EXPECT_THAT(Error(no_local), HasSubstr("needs --local"));
  EXPECT_THAT(Error({"submit", "--local"}), HasSubstr("--local does not apply"));
}

// --pin, --exclude and --range are checked against the operator's knob space at once (a usage
// error naming the rule), as the coordinator checks them again (server_validate_test).
TEST(FlagsTest, KnobConstraintsAreCheckedAgainstTheSpace) {
  Invocation inv;
  ASSERT_TRUE(
      Parse(Submit({"--pin", "MR=8", "--exclude", "PACK=0", "--exclude", "UNROLL=1,2", "--exclude",
                    "UNROLL=2,8", "--range", "KC=128..512", "--range", "NC=..2048"}),
            &inv)
          .ok());
  EXPECT_THAT(inv.spec.exclude().at("UNROLL").values(), ::testing::ElementsAre(1, 2, 8));
  EXPECT_EQ(inv.spec.range().at("KC").lo(), 128);
  EXPECT_EQ(inv.spec.range().at("KC").hi(), 512);
  EXPECT_EQ(inv.spec.range().at("NC").lo(), INT64_MIN);
  EXPECT_EQ(inv.spec.range().at("NC").hi(), 2048);
  EXPECT_EQ(Error(Submit({"--pin", "MR=7"})),
            "--pin MR=7: MR takes 1, 2, 3, 4, 5, 6, 8, 12, 14 (gemm on cpu)");
  EXPECT_THAT(Error(Submit({"--pin", "NOPE=1"})),
              HasSubstr("--pin NOPE=1: gemm on cpu has no knob NOPE (knobs: "));
  EXPECT_THAT(Error(Submit({"--exclude", "MR=7"})),
              HasSubstr("--exclude MR=7: 7 is not a value; MR takes 1, 2"));
  EXPECT_THAT(Error(Submit({"--exclude", "PACK=0,1"})),
              HasSubstr("--exclude PACK=0,1: leaves PACK no value"));
  EXPECT_THAT(Error(Submit({"--range", "MR=20..30"})),
              HasSubstr("--range MR=20..30: no value lies in 20..30; MR takes"));
  EXPECT_THAT(Error(Submit({"--range", "MR=8..2"})), HasSubstr("LO must not exceed HI"));
  EXPECT_THAT(Error(Submit({"--range", "MR=20.."})),
              HasSubstr("--range MR=20..: no value lies in 20..; MR takes"));
  EXPECT_THAT(Error(Submit({"--range", "MR=1-4"})), HasSubstr("expected KNOB=LO..HI"));
  EXPECT_THAT(Error(Submit({"--range", "MR=1..4", "--range", "MR=2..4"})),
              HasSubstr("given twice"));
  EXPECT_THAT(Error(Submit({"--exclude", "MR"})), HasSubstr("expected KNOB=V1,V2"));
  EXPECT_THAT(Error(Submit({"--pin", "MR=4", "--exclude", "MR=4"})), HasSubstr("contradict"));
  EXPECT_THAT(Error(Submit({"--pin", "MR=4", "--range", "MR=6..8"})),
              HasSubstr("--pin MR=4 lies outside --range MR=6..8"));
  // Each value exists, but no configuration obeys every rule together: 8x64 accumulators do not
  // fit in the vector registers of any width; the rule is named.
  EXPECT_THAT(Error(Submit({"--pin", "MR=8", "--pin", "NR=64"})),
              HasSubstr("no configuration of gemm on cpu satisfies them (MR*NR/"));
  // A thread count is a value of some chip (one with that many cores); a label that names the
  // vector width narrows the check to it: NR=8 is not whole 16-lane vectors.
  EXPECT_TRUE(Parse(Submit({"--pin", "NT=6"}), &inv).ok());
  EXPECT_TRUE(Parse(Submit({"--pin", "NR=8"}), &inv).ok());
  std::vector<std::string> avx512 = Submit({"--pin", "NR=8"});
  avx512[6] = "cpu-x86_64-avx512";
  EXPECT_THAT(Error(avx512), HasSubstr("no configuration of gemm on cpu satisfies them (NR % 16"));
  // Model jobs name several operators' knobs: the coordinator checks them.
  Invocation model;
  EXPECT_TRUE(
      Parse({"submit", "--model", "tinyllama-1.1b", "--chip", "cpu", "--exclude", "VEC=4"}, &model)
          .ok());
  EXPECT_EQ(model.spec.exclude().at("VEC").values_size(), 1);
}

// One cap on --budget: the coordinator's (kMaxBudgetTrials), as the user guide says.
TEST(FlagsTest, BudgetCapIsTheCoordinators) {
  Invocation inv;
  EXPECT_TRUE(Parse(Submit({"--budget", "100000"}), &inv).ok());
  EXPECT_THAT(Error(Submit({"--budget", "100001"})), HasSubstr("1..100000"));
}

TEST(FlagsTest, KnobsBestAndExportBestNameAWorkloadAndAChip) {
  Invocation inv;
  ASSERT_TRUE(
      Parse({"knobs", "--op", "gemm", "--shape", "M=8,N=4096,K=4096", "--chip", "cpu", "--json"},
            &inv)
          .ok());
  EXPECT_EQ(inv.command, "knobs");
  EXPECT_TRUE(inv.json);
  EXPECT_EQ(inv.spec.workload().dims().at("N"), 4096);
  EXPECT_EQ(inv.spec.chip(), "cpu");
  // Offline, but a wrapper's --coordinator is accepted (and unused).
  EXPECT_TRUE(Parse({"--coordinator", "h:1", "knobs", "--op", "gemm", "--shape", "M=8,N=8,K=8",
                     "--chip", "cpu"},
                    &inv)
                  .ok());
  EXPECT_THAT(
      Error({"knobs", "--op", "gemm", "--shape", "M=8,N=8,K=8", "--chip", "cpu", "--budget", "4"}),
      HasSubstr("--budget does not apply to 'kiln knobs'"));
  EXPECT_THAT(Error({"knobs", "--op", "gemm", "--shape", "M=8,N=8,K=8"}),
              HasSubstr("missing --chip"));
  ASSERT_TRUE(
      Parse({"best", "--op", "gemm", "--shape", "M=8,N=1024,K=1024", "--chip", "cpu"}, &inv).ok());
  EXPECT_EQ(inv.command, "best");
  EXPECT_EQ(inv.coordinator, "127.0.0.1:50051");
  EXPECT_THAT(Error({"best", "--chip", "cpu"}), HasSubstr("missing --op and --shape"));
  EXPECT_THAT(
      Error({"best", "--op", "gemm", "--shape", "M=8,N=8,K=8", "--chip", "cpu", "--pin", "MR=8"}),
      HasSubstr("--pin does not apply to 'kiln best'"));
  Invocation ex;
  ASSERT_TRUE(Parse({"export", "--best", "--op", "gemm", "--shape", "M=8,N=1024,K=1024", "--chip",
                     "cpu", "--out", "/tmp/x"},
                    &ex)
                  .ok());
  EXPECT_TRUE(ex.best);
  EXPECT_EQ(ex.job_id, "");
  EXPECT_EQ(ex.out, "/tmp/x");
  EXPECT_THAT(
      Error({"export", "--best", "j-1", "--op", "gemm", "--shape", "M=8,N=8,K=8", "--chip", "cpu"}),
      HasSubstr("unexpected argument 'j-1'"));
  EXPECT_THAT(Error({"export", "j-1", "--op", "gemm"}),
              HasSubstr("--op applies to 'kiln export --best'"));
  EXPECT_THAT(Error({"export", "--best", "--chip", "cpu"}), HasSubstr("missing --op"));
}

}  // namespace
}  // namespace kiln::cli
