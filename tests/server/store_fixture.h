// Store test fixture: one store per test, an SQLite file or a fresh database on the PostgreSQL
// server that tests/deploy/with_postgres.sh started (KILN_TEST_POSTGRES); skips without one.
#pragma once

#include <sqlite3.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "server/store/store.h"
#include "tests/server/test_util.h"

namespace kiln::server::testing {

inline constexpr char kWorkload[] = "gemm m=8 n=64 k=64 fp32";

inline v1::TuningRecord Record(const std::string& config_key, double us,
                               v1::MeasurementStatus st = v1::OK,
                               const std::string& chip = "cpu-avx2") {
  v1::TuningRecord r;
  r.set_workload_key(kWorkload);
  r.set_chip_type(chip);
  r.set_config_key(config_key);
  r.mutable_measurement()->set_status(st);
  r.mutable_measurement()->set_median_us(us);
  return r;
}

inline v1::Job Job(const std::string& id, v1::JobState state, int64_t created_ms) {
  v1::Job j;
  j.set_id(id);
  j.set_state(state);
  j.set_created_unix_ms(created_ms);
  return j;
}

inline v1::Trial Trial(const std::string& job_id, int64_t seq) {
  v1::Trial t;
  char id[64];
  std::snprintf(id, sizeof(id), "%s-%06lld", job_id.c_str(), static_cast<long long>(seq));
  t.set_id(id);
  t.set_job_id(job_id);
  t.set_seq(seq);
  return t;
}

// The param is the backend: "sqlite" or "postgres".
class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    if (!postgres()) {
      spec_ = "sqlite:" + dir_ + "/kiln.db";
      return;
    }
    const char* base = std::getenv("KILN_TEST_POSTGRES");  // postgresql://USER@HOST:PORT
    if (!base || !*base) {
      const char* why = std::getenv("KILN_TEST_POSTGRES_SKIP");
      GTEST_SKIP() << (why ? why
                           : "KILN_TEST_POSTGRES is not set; run through tests/deploy/"
                             "with_postgres.sh (ctest -R server_store_postgres_test)");
    }
    if (OpenStore(std::string(base) + "/postgres", dir_).status().code() ==
        absl::StatusCode::kUnimplemented)
      GTEST_SKIP() << "this build has no PostgreSQL store (KILN_WITH_POSTGRES is OFF)";
    db_ = "kiln_test_" + std::to_string(std::random_device()() % 1000000000);
    base_ = base;
    ASSERT_TRUE(Admin("CREATE DATABASE " + db_, "postgres"));
    spec_ = base_ + "/" + db_;
  }

  bool postgres() const { return GetParam() == "postgres"; }
  absl::StatusOr<std::unique_ptr<Store>> Open() { return OpenStore(spec_, dir_); }
  absl::StatusOr<std::unique_ptr<Store>> OpenReader() { return OpenStoreReader(spec_); }

  // Runs SQL on the store's database behind the store's back: sqlite3, or psql
  // ($KILN_TEST_PSQL) against `db` (default: this test's database).
  bool Admin(const std::string& sql, const std::string& db = "") {
    if (!postgres()) {
      sqlite3* h = nullptr;
      bool ok = sqlite3_open((dir_ + "/kiln.db").c_str(), &h) == SQLITE_OK &&
                sqlite3_exec(h, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK;
      sqlite3_close(h);
      return ok;
    }
    std::string file = dir_ + "/admin.sql";
    std::ofstream(file) << sql << ";\n";
    const char* psql = std::getenv("KILN_TEST_PSQL");
    std::string cmd = std::string(psql ? psql : "psql") + " -X -q -v ON_ERROR_STOP=1 -d '" + base_ +
                      "/" + (db.empty() ? db_ : db) + "' -f " + file + " >/dev/null";
    return std::system(cmd.c_str()) == 0;
  }

  std::string dir_, spec_, base_, db_;
};

}  // namespace kiln::server::testing
