#include "server/store/store.h"

#include <fstream>

#include "gtest/gtest.h"
#include "tests/server/test_util.h"

namespace kiln::server {
namespace {

v1::TuningRecord Record(const std::string& config_key, double us,
                        v1::MeasurementStatus st = v1::OK) {
  v1::TuningRecord r;
  r.set_workload_key("gemm m=8 n=64 k=64 fp32");
  r.set_chip_type("cpu-x86_64-avx2");
  r.set_config_key(config_key);
  r.mutable_measurement()->set_status(st);
  r.mutable_measurement()->set_median_us(us);
  return r;
}

TEST(SqliteStore, RoundTripsEveryKind) {
  std::string dir = testing::TempDir();
  {
    auto store = *OpenStore("", dir);
    WriteBatch b;
    v1::Job j;
    j.set_id("j-000000000001");
    j.set_state(v1::RUNNING);
    b.jobs.push_back(j);
    v1::Trial t;
    t.set_id("j-000000000001-000001");
    t.set_job_id(j.id());
    t.set_seq(1);
    b.trials.push_back(t);
    v1::WorkerInfo w;
    w.set_id("w-000000000001");
    b.workers.push_back(w);
    b.records = {Record("A=1", 30), Record("A=2", 10), Record("A=3", 5, v1::WRONG_RESULT)};
    ASSERT_TRUE(store->Write(b).ok());
  }
  auto store = *OpenStore("sqlite:" + dir + "/kiln.db", dir);
  EXPECT_EQ(store->LoadJobs()->at(0).state(), v1::RUNNING);
  EXPECT_EQ(store->LoadTrials("j-000000000001")->size(), 1u);
  EXPECT_EQ(store->LoadWorkers()->size(), 1u);
  auto top = *store->TopRecords("gemm m=8 n=64 k=64 fp32", "cpu-x86_64-avx2", 5);
  ASSERT_EQ(top.size(), 2u);  // failures are never "best"
  EXPECT_EQ(top[0].config_key(), "A=2");
  EXPECT_TRUE(store->FindRecord("gemm m=8 n=64 k=64 fp32", "cpu-x86_64-avx2", "A=3")->has_value());
  EXPECT_FALSE(store->FindRecord("gemm m=8 n=64 k=64 fp32", "cpu-other", "A=3")->has_value());
}

TEST(SqliteStore, UnopenableOrForeignFilesGiveClearErrors) {
  auto s = OpenStore("sqlite:/nonexistent-dir/x/kiln.db", "/tmp");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent-dir/x/kiln.db"), std::string::npos);
  std::string dir = testing::TempDir();
  std::ofstream(dir + "/junk.db") << "this is not a database, just some text that is long enough";
  auto junk = OpenStore("sqlite:" + dir + "/junk.db", dir);
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("junk.db"), std::string::npos);
  EXPECT_EQ(OpenStore("postgresql://x", dir).status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln::server
