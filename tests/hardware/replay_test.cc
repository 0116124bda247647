// The replay backend: parsing Kernel Tuner caches and Kiln records (good, malformed, truncated),
// answering trials, and carrying its space to the coordinator in the fingerprint.
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "codegen/kernel_template.h"
#include "gtest/gtest.h"
#include "hardware/device.h"
#include "hardware/replay/replay_device.h"
#include "hardware/replay/replay_set.h"

namespace kiln::hardware {
namespace {

// Two knobs (one with text values); (4, "b") is absent: excluded by the kernel's restrictions.
constexpr char kGood[] = R"({
  "device_name": "Test GPU", "kernel_name": "my_gemm", "problem_size": [64, 32],
  "tune_params_keys": ["block", "mode"],
  "tune_params": {"block": [2, 4], "mode": ["a", "b"]},
  "objective": "time",
  "cache": {
    "2,a": {"block": 2, "mode": "a", "time": 1.5, "times": [1.4, 1.5, 1.6]},
    "2,b": {"block": 2, "mode": "b", "time": "CompilationFailedConfig"},
    "4,a": {"block": 4, "mode": "a", "time": 0.75}
  }})";

absl::StatusOr<std::shared_ptr<const ReplaySet>> Parse(const std::string& text) {
  return ParseReplaySet(text, "test");
}

TEST(ReplaySet, ParsesAKernelTunerCache) {
  auto set = Parse(kGood);
  ASSERT_TRUE(set.ok()) << set.status();
  const ReplaySet& s = **set;
  EXPECT_EQ(s.kernel, "my_gemm");
  EXPECT_EQ(s.device, "Test GPU");
  ASSERT_EQ(s.knobs.size(), 2u);
  EXPECT_EQ(s.knobs[0].values, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(s.knobs[1].values, (std::vector<int64_t>{0, 1}));  // text values: positions
  EXPECT_EQ(s.knobs[1].labels, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(s.entries.size(), 3u);
  EXPECT_DOUBLE_EQ(s.BestUs(), 750);
  EXPECT_EQ(s.CountWithin(0.95), 1);
  const ReplayEntry* failed = s.Find({{"block", 2}, {"mode", 1}});
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->status, v1::COMPILE_ERROR);
  EXPECT_EQ(s.Find({{"block", 4}, {"mode", 1}}), nullptr);  // absent
  v1::Measurement m = s.MeasurementOf(*s.Find({{"block", 2}, {"mode", 0}}));
  EXPECT_EQ(m.status(), v1::OK);
  EXPECT_DOUBLE_EQ(m.median_us(), 1500);
  EXPECT_EQ(m.samples_us_size(), 3);
  // The space masks the absent combination.
  codegen::KnobSpace space = s.Space();
  EXPECT_EQ(space.EnumerateValid().size(), 3u);
  EXPECT_FALSE(space.IsValid({{"block", 4}, {"mode", 1}}));
}

TEST(ReplaySet, ReadsTheSharedDataFilesWhenPresent) {
  auto set = LoadReplaySet("/work/shared/data/replay/pnpoly_RTX_3090.json");
  if (!set.ok() && set.status().code() == absl::StatusCode::kNotFound) GTEST_SKIP();
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ((*set)->entries.size(), 4092u);
  EXPECT_EQ((*set)->knobs.size(), 4u);
}

TEST(ReplaySet, MalformedFilesAreClearErrors) {
  struct Case {
    const char* text;
    const char* says;
  } cases[] = {
      {"", "empty"},
      {"[1, 2, 3]", "neither a Kernel Tuner cache"},
      {R"({"cache": {}})", "tune_params_keys"},
      {R"({"tune_params_keys": ["x"], "tune_params": {}, "cache": {}})", "no domain for x"},
      {R"({"tune_params_keys": ["x"], "tune_params": {"x": [1]}, "cache": []})", "cache"},
      {R"({"tune_params_keys": ["x"], "tune_params": {"x": [1]}, "cache": {}})",
       "no recorded configurations"},
      {R"({"tune_params_keys": ["x"], "tune_params": {"x": [1]},
           "cache": {"2": {"x": 2, "time": 1}}})",
       "not in its domain"},
      {R"({"tune_params_keys": ["x"], "tune_params": {"x": [1]},
           "cache": {"1": {"x": 1, "time": -3}}})",
       "positive number"},
      {R"({"tune_params_keys": ["x"], "tune_params": {"x": [1]},
           "cache": {"1": {"x": 1}}})",
       "no \"time\""},
      {R"({"tune_params_keys": ["x"], "tune_params": {"x": 5}, "cache": {}})", "list of values"},
      {"{\"records\": [{\"config\": 7}]}", "record"},
  };
  for (const auto& c : cases) {
    auto set = Parse(c.text);
    ASSERT_FALSE(set.ok()) << c.text;
    EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(set.status().message().find(c.says), std::string::npos)
        << c.text << " -> " << set.status().message();
  }
}

// A replay file is read whole, so only a regular file of bounded size is read; numbers that do
// not fit their field and deep nesting are refused with a clear error, not undefined behaviour
// or a stack overflow.
TEST(ReplaySet, HugeOddAndMalformedFilesAreClearErrors) {
  for (const char* path : {"/dev/zero", "/tmp"}) {
    auto set = LoadReplaySet(path);
    ASSERT_FALSE(set.ok()) << path;
    EXPECT_NE(set.status().message().find("not a regular file"), std::string::npos)
        << set.status().message();
  }
  const std::string sparse = ::testing::TempDir() + "/kiln-replay-huge.json";
  {
    std::ofstream f(sparse);
    f << "{";
  }
  ASSERT_EQ(truncate(sparse.c_str(), static_cast<off_t>(kMaxReplayFileBytes) + 1), 0);
  auto huge = LoadReplaySet(sparse);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("a replay file may have"), std::string::npos)
      << huge.status().message();
  std::remove(sparse.c_str());

  std::string good = kGood;
  const std::string deep = "{\"records\": [" + std::string(100000, '[') + "]}";
  std::string bad_size = good;
  bad_size.replace(bad_size.find("[64, 32]"), 8, "[1e300, 32]");
  struct Case {
    std::string text;
    const char* says;
  } cases[] = {
      {deep, "nested deeper than 64"},
      {bad_size, "problem_size: expected non-negative integers"},
      {R"({"workload_key": "k", "chip_type": "c", "config": {"knobs": {"A": 1}},
          "measurement": {"status": "OK", "median_us": "Infinity"}})",
       "finite positive median"},
  };
  for (const auto& c : cases) {
    auto set = Parse(c.text);
    ASSERT_FALSE(set.ok()) << c.text.substr(0, 200);
    EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(set.status().message().find(c.says), std::string::npos)
        << c.text.substr(0, 200) << " -> " << set.status().message();
  }
  // Non-positive samples are dropped, the rest kept.
  std::string bad_sample = good;
  bad_sample.replace(bad_sample.find("[1.4, 1.5, 1.6]"), 15, "[1.4, -1, 0]");
  auto kept = Parse(bad_sample);
  ASSERT_TRUE(kept.ok()) << kept.status();
  for (const auto& e : (*kept)->entries)
    for (double us : e.samples_us) EXPECT_GT(us, 0);
}

TEST(ReplaySet, TruncatedFilesAreClearErrorsAtEveryCut) {
  const std::string good = kGood;
  for (size_t cut = 1; cut + 1 < good.size(); cut += 7) {
    auto set = Parse(good.substr(0, cut));
    ASSERT_FALSE(set.ok()) << "cut at " << cut;
    EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  }
  const std::string path = ::testing::TempDir() + "/truncated.json";
  std::ofstream(path) << good.substr(0, good.size() / 2);
  auto set = LoadReplaySet(path);
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find(path), std::string::npos);
  EXPECT_NE(set.status().message().find("truncated"), std::string::npos);
  std::remove(path.c_str());
  EXPECT_EQ(LoadReplaySet("/nonexistent/set.json").status().code(), absl::StatusCode::kNotFound);
}

TEST(ReplaySet, ParsesKilnRecordExports) {
  const std::string r1 =
      R"({"workloadKey": "w", "chipType": "cpu-x", "config": {"knobs": {"MR": "4", "NR": "8"}},)"
      R"( "measurement": {"status": "OK", "medianUs": 12.5}})";
  const std::string r2 =
      R"({"workloadKey": "w", "chipType": "cpu-x", "config": {"knobs": {"MR": "8", "NR": "8"}},)"
      R"( "measurement": {"status": "COMPILE_ERROR", "message": "no"}})";
  const std::string r3 =
      R"({"workloadKey": "w", "chipType": "cpu-x", "config": {"knobs": {"MR": "4", "NR": "8"}},)"
      R"( "measurement": {"status": "OK", "medianUs": 11.0}})";
  auto set = Parse(r1 + "\n" + r2 + "\n\n" + r3 + "\n");  // JSON Lines
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ((*set)->entries.size(), 2u);  // measured twice: the best OK figure is kept
  EXPECT_DOUBLE_EQ((*set)->BestUs(), 11.0);
  auto wrapped = Parse(R"({"records": [)" + r1 + ", " + r2 + "]}");
  ASSERT_TRUE(wrapped.ok()) << wrapped.status();
  EXPECT_EQ((*wrapped)->entries.size(), 2u);
  auto mixed = Parse(r1 + "\n" + R"({"workloadKey": "other", "chipType": "cpu-x"})");
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("one workload and chip per set"), std::string::npos);
  EXPECT_FALSE(Parse(r1 + "\n" + r2.substr(0, 40)).ok());  // truncated last line
}

TEST(ReplayDevice, AnswersTrialsAndCarriesItsSpace) {
  auto set = Parse(kGood);
  ASSERT_TRUE(set.ok());
  std::unique_ptr<Device> dev = NewReplayDevice(*set);
  const v1::ChipFingerprint& fp = dev->Fingerprint();
  EXPECT_EQ(fp.kind(), "replay");
  EXPECT_EQ(fp.chip_type(), "replay-test");
  // Labels derived from file names are valid --chip values: lower case, odd characters as '-'.
  auto upper = ParseReplaySet(kGood, "gemm_RTX 3090+x");
  ASSERT_TRUE(upper.ok());
  EXPECT_EQ(NewReplayDevice(*upper)->Fingerprint().chip_type(), "replay-gemm_rtx-3090-x");
  // The coordinator's view of the space: exactly the recorded configurations.
  v1::Workload w;
  w.set_op(v1::GEMM);
  auto space = codegen::SpaceFor(w, fp);
  ASSERT_TRUE(space.ok()) << space.status();
  EXPECT_EQ(space->EnumerateValid().size(), 3u);
  // A worker renders, "compiles" and measures (in a child that has only the fingerprint).
  auto tmpl = codegen::FindTemplate(w, "replay");
  ASSERT_TRUE(tmpl.ok());
  auto kernel = (*tmpl)->Render(w, {{"block", 4}, {"mode", 0}}, {});
  ASSERT_TRUE(kernel.ok());
  auto compiled = dev->Compile(*kernel);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto child = OpenDevice("replay:/nonexistent/only-the-fingerprint.json", &fp);
  ASSERT_TRUE(child.ok());
  v1::Measurement m = (*child)->Measure(w, *compiled, {});
  EXPECT_EQ(m.status(), v1::OK);
  EXPECT_DOUBLE_EQ(m.median_us(), 750);
  auto failed = dev->Compile(*(*tmpl)->Render(w, {{"block", 2}, {"mode", 1}}, {}));
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("CompilationFailedConfig"), std::string::npos);
  EXPECT_FALSE(dev->Compile(*(*tmpl)->Render(w, {{"block", 4}, {"mode", 1}}, {})).ok());
  v1::Measurement base = dev->MeasureBaseline(w, {});
  EXPECT_EQ(base.status(), v1::OK);
  EXPECT_FALSE(OpenDevice("replay:/nonexistent/set.json").ok());
}

}  // namespace
}  // namespace kiln::hardware
