// The Store contract, run against SQLite and against a real PostgreSQL server (the postgres
// variants need KILN_TEST_POSTGRES, set by tests/deploy/with_postgres.sh; they skip without it).
#include "server/store/store.h"

#include <algorithm>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/server/store_fixture.h"

namespace kiln::server {
namespace {

using testing::Job;
using testing::kWorkload;
using testing::Record;
using testing::StoreTest;
using testing::Trial;

TEST_P(StoreTest, RoundTripsEveryKind) {
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    WriteBatch b;
    b.jobs.push_back(Job("j-000000000001", v1::RUNNING, 5));
    b.trials.push_back(Trial("j-000000000001", 1));
    v1::WorkerInfo w;
    w.set_id("w-000000000001");
    b.workers.push_back(w);
    b.records = {Record("A=1", 30), Record("A=2", 10), Record("A=3", 5, v1::WRONG_RESULT)};
    ASSERT_TRUE((*store)->Write(b).ok());
  }
  auto store = *Open();  // reopened: everything came from the database
  EXPECT_EQ(store->LoadJobs()->at(0).state(), v1::RUNNING);
  EXPECT_EQ(store->LoadTrials("j-000000000001")->size(), 1u);
  EXPECT_EQ(store->LoadWorkers()->size(), 1u);
  auto top = *store->TopRecords(kWorkload, "cpu-avx2", 5);
  ASSERT_EQ(top.size(), 2u);  // failures are never "best"
  EXPECT_EQ(top[0].config_key(), "A=2");
  EXPECT_TRUE(store->FindRecord(kWorkload, "cpu-avx2", "A=3")->has_value());
  EXPECT_FALSE(store->FindRecord(kWorkload, "cpu-other", "A=3")->has_value());
}

TEST_P(StoreTest, UpsertsReplaceAndLoadsAreOrdered) {
  auto store = *Open();
  WriteBatch b;
  b.jobs = {Job("j-b", v1::QUEUED, 20), Job("j-a", v1::QUEUED, 10)};
  b.trials = {Trial("j-a", 3), Trial("j-a", 1), Trial("j-b", 2), Trial("j-a", 2)};
  b.records = {Record("A=1", 30)};
  ASSERT_TRUE(store->Write(b).ok());
  WriteBatch again;
  again.jobs = {Job("j-a", v1::SUCCEEDED, 10)};
  again.records = {Record("A=1", 7, v1::OK)};
  ASSERT_TRUE(store->Write(again).ok());
  auto jobs = *store->LoadJobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].id(), "j-a");  // by creation time
  EXPECT_EQ(jobs[0].state(), v1::SUCCEEDED);
  auto trials = *store->LoadTrials("j-a");
  ASSERT_EQ(trials.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(trials[i].seq(), i + 1);
  EXPECT_EQ((*store->FindRecord(kWorkload, "cpu-avx2", "A=1"))->measurement().median_us(), 7);
  EXPECT_TRUE(store->LoadTrials("j-none")->empty());
}

TEST_P(StoreTest, TopRecordsRankAcrossChipsAndLimit) {
  auto store = *Open();
  WriteBatch b;
  b.records = {Record("A=1", 3, v1::OK, "cpu-a"), Record("A=2", 2, v1::OK, "cpu-b"),
               Record("A=3", 1, v1::TIMEOUT, "cpu-a"), Record("A=4", 4, v1::OK, "cpu-a")};
  ASSERT_TRUE(store->Write(b).ok());
  auto any = *store->TopRecords(kWorkload, "", 2);
  ASSERT_EQ(any.size(), 2u);
  EXPECT_EQ(any[0].config_key(), "A=2");
  EXPECT_EQ(any[1].config_key(), "A=1");
  EXPECT_EQ(store->TopRecords(kWorkload, "cpu-a", 10)->size(), 2u);
  EXPECT_TRUE(store->TopRecords("gemm m=1 n=1 k=1 fp32", "", 10)->empty());
}

TEST_P(StoreTest, RecordKeyHashesNameEveryRecordOfAWorkloadOnAChipType) {
  auto store = *Open();
  WriteBatch b;
  b.records = {Record("A=1", 3, v1::OK, "cpu-a"), Record("A=2", 2, v1::TIMEOUT, "cpu-a"),
               Record("A=3", 1, v1::OK, "cpu-b")};
  ASSERT_TRUE(store->Write(b).ok());
  auto keys = store->RecordKeyHashes(kWorkload, "cpu-a");
  ASSERT_TRUE(keys.ok()) << keys.status();
  std::vector<uint64_t> want = {RecordKeyHash("A=1"), RecordKeyHash("A=2")};  // failures too
  std::sort(want.begin(), want.end());
  EXPECT_EQ(*keys, want);
  EXPECT_NE(RecordKeyHash("A=1"), RecordKeyHash("A=2"));
  EXPECT_TRUE(store->RecordKeyHashes("gemm m=1 n=1 k=1 fp32", "cpu-a")->empty());
}

TEST_P(StoreTest, ValuesRoundTripExactly) {
  auto store = *Open();
  v1::TuningRecord r = Record("A=1", 1.0 / 3);
  for (double s : {0.0, 1.0 / 3, 1e-300, 12345.678901234567})
    r.mutable_measurement()->add_samples_us(s);
  r.mutable_measurement()->set_message("naïve: quotes ' \" and \\ survive");
  WriteBatch b;
  b.records = {r};
  ASSERT_TRUE(store->Write(b).ok());
  auto back = *store->FindRecord(kWorkload, "cpu-avx2", "A=1");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->SerializeAsString(), r.SerializeAsString());
  EXPECT_EQ(store->TopRecords(kWorkload, "", 1)->at(0).measurement().median_us(), 1.0 / 3);
  // Keys with what array and string syntaxes treat specially, and a key twice in one batch (the
  // last copy stands, as when written one after another).
  const std::string odd = "B=\"{1,2}\"\\ 'x' NULL";
  v1::TuningRecord first = Record(odd, 7), last = Record(odd, 5);
  b.records = {first, last};
  ASSERT_TRUE(store->Write(b).ok());
  back = *store->FindRecord(kWorkload, "cpu-avx2", odd);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->SerializeAsString(), last.SerializeAsString());
}

TEST_P(StoreTest, BatchIsAllOrNothing) {
  auto store = *Open();
  // The database rejects negative medians behind the store's back; the job of the same batch
  // must not be written either.
  ASSERT_TRUE(Admin(postgres()
                        ? "ALTER TABLE records ADD CONSTRAINT positive CHECK (median_us >= 0)"
                        : "CREATE TRIGGER positive BEFORE INSERT ON records WHEN "
                          "NEW.median_us < 0 BEGIN SELECT RAISE(ABORT, 'negative'); END"));
  WriteBatch bad;
  bad.jobs = {Job("j-bad", v1::QUEUED, 1)};
  bad.trials = {Trial("j-bad", 1)};
  bad.records = {Record("A=1", 5), Record("A=2", -1)};
  EXPECT_FALSE(store->Write(bad).ok());
  EXPECT_TRUE(store->LoadJobs()->empty());
  EXPECT_TRUE(store->LoadTrials("j-bad")->empty());
  EXPECT_FALSE(store->FindRecord(kWorkload, "cpu-avx2", "A=1")->has_value());
  WriteBatch good;  // the store is still usable
  good.jobs = {Job("j-good", v1::QUEUED, 1)};
  EXPECT_TRUE(store->Write(good).ok());
  EXPECT_EQ(store->LoadJobs()->size(), 1u);
}

TEST_P(StoreTest, RefusesASchemaNewerThanItself) {
  { ASSERT_TRUE(Open().ok()); }
  ASSERT_TRUE(Admin(postgres() ? "UPDATE kiln_meta SET value = '99' WHERE key = 'schema_version'"
                               : "PRAGMA user_version = 99"));
  auto again = Open();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("upgrade kiln-coordinator"), std::string::npos);
}

TEST_P(StoreTest, ConcurrentWritersLoseNothing) {
  auto store = *Open();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        WriteBatch b;
        b.trials = {Trial("j-c", t * 100 + i)};
        EXPECT_TRUE(store->Write(b).ok());
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(store->LoadTrials("j-c")->size(), 80u);
}

// One job read by id (archived jobs are read on demand); workers deleted in a batch (purged).
TEST_P(StoreTest, LoadsOneJobAndRemovesWorkers) {
  auto store = *Open();
  WriteBatch b;
  b.jobs = {Job("j-000000000001", v1::SUCCEEDED, 10), Job("j-000000000002", v1::RUNNING, 20)};
  for (const char* id : {"w-000000000001", "w-000000000002"}) b.workers.emplace_back().set_id(id);
  ASSERT_TRUE(store->Write(b).ok());
  auto one = store->LoadJob("j-000000000002");
  ASSERT_TRUE(one.ok() && one->has_value()) << one.status();
  EXPECT_EQ((*one)->state(), v1::RUNNING);
  EXPECT_FALSE(store->LoadJob("j-000000000009")->has_value());
  WriteBatch gone;
  gone.removed_workers = {"w-000000000001", "w-000000000404"};
  EXPECT_FALSE(gone.empty());
  ASSERT_TRUE(store->Write(gone).ok());
  auto workers = *store->LoadWorkers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].id(), "w-000000000002");
}

// A standby's reader: opens while the leader holds the database (it takes no lock), reads what
// the leader wrote, writes nothing; the leader's lock still keeps a second writer off.
TEST_P(StoreTest, AReaderReadsBesideTheLeaderAndWritesNothing) {
  if (!postgres()) {
    EXPECT_EQ(OpenReader().status().code(), absl::StatusCode::kUnimplemented);
    return;
  }
  auto leader = *Open();
  auto reader = OpenReader();
  ASSERT_TRUE(reader.ok()) << reader.status();
  WriteBatch b;
  b.jobs = {Job("j-000000000001", v1::RUNNING, 10)};
  ASSERT_TRUE(leader->Write(b).ok());
  auto jobs = (*reader)->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*reader)->Write(b).code(), absl::StatusCode::kFailedPrecondition);
  auto second = Open();
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(IsLeaderElsewhere(second.status())) << second.status();
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

TEST(SqliteStore, UnopenableOrForeignFilesGiveClearErrors) {
  auto s = OpenStore("sqlite:/nonexistent-dir/x/kiln.db", "/tmp");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent-dir/x/kiln.db"), std::string::npos);
  std::string dir = testing::TempDir();
  std::ofstream(dir + "/junk.db") << "this is not a database, just some text that is long enough";
  auto junk = OpenStore("sqlite:" + dir + "/junk.db", dir);
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("junk.db"), std::string::npos);
}

TEST(PostgresStore, UnreachableServerIsNamedWithoutItsPassword) {
  // Port 1 on loopback refuses at once; nothing leaves the machine.
  auto s = OpenStore("postgresql://kiln:s3cret@127.0.0.1:1/kiln", "/tmp");
  ASSERT_FALSE(s.ok());
  if (s.status().code() == absl::StatusCode::kUnimplemented)
    GTEST_SKIP() << "this build has no PostgreSQL store (KILN_WITH_POSTGRES is OFF)";
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find("127.0.0.1:1"), std::string::npos) << s.status();
  EXPECT_EQ(s.status().message().find("s3cret"), std::string::npos) << s.status();
}

TEST(StoreSpec, PasswordsAreRedacted) {
  EXPECT_EQ(RedactStoreSpec("postgresql://u:pw@h:5/db?password=x&sslmode=require"),
            "postgresql://u:***@h:5/db?password=***&sslmode=require");
  EXPECT_EQ(RedactStoreSpec("postgresql://u@h/db"), "postgresql://u@h/db");
  EXPECT_EQ(RedactStoreSpec("sqlite:/a:b@c"), "sqlite:/a:b@c");
}

}  // namespace
}  // namespace kiln::server
