// The store's record decoding: a row whose body is arbitrary bytes (a damaged or tampered
// kiln.db), read back through the SQLite store as the coordinator does at start (LoadWorkers,
// LoadJobs, LoadJob, LoadTrials) and when it answers from the tuning database (FindRecord,
// TopRecords), then records on to the replay sets pretraining builds from a store. The first byte
// picks the table; the rest is the body. Findings: a crash or sanitizer report.
#include <google/protobuf/stubs/logging.h>
#include <sqlite3.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "hardware/replay/replay_set.h"
#include "server/store/sqlite/sqlite_store.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

constexpr char kJob[] = "j-00000000f022";

struct Db {
  std::string dir;
  std::unique_ptr<kiln::server::Store> store;
  sqlite3* raw = nullptr;
};

Db& Open() {
  static Db* db = [] {
    auto* d = new Db;
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-fuzz-store-XXXXXX";
    if (!mkdtemp(pattern.data())) kiln::fuzz::Finding("mkdtemp", pattern);
    d->dir = pattern;
    auto store = kiln::server::NewSqliteStore(d->dir + "/kiln.db");
    if (!store.ok()) kiln::fuzz::Finding("NewSqliteStore", store.status().ToString());
    d->store = std::move(*store);
    if (sqlite3_open((d->dir + "/kiln.db").c_str(), &d->raw) != SQLITE_OK)
      kiln::fuzz::Finding("sqlite3_open", d->dir);
    sqlite3_exec(d->raw, "PRAGMA synchronous=OFF", nullptr, nullptr, nullptr);
    std::atexit([] {
      sqlite3_close(db->raw);
      db->store.reset();
      for (const char* f : {"/kiln.db", "/kiln.db-wal", "/kiln.db-shm"})
        unlink((db->dir + f).c_str());
      rmdir(db->dir.c_str());
    });
    return d;
  }();
  return *db;
}

void Put(sqlite3* raw, const char* sql, const std::string& body) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(raw, sql, -1, &s, nullptr) != SQLITE_OK)
    kiln::fuzz::Finding("prepare", sqlite3_errmsg(raw));
  sqlite3_bind_blob(s, 1, body.data(), static_cast<int>(body.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(s) != SQLITE_DONE) kiln::fuzz::Finding("insert", sqlite3_errmsg(raw));
  sqlite3_finalize(s);
}

}  // namespace

// Protobuf logs every malformed string field it parses; at fuzzing speed that is all the output.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Db& db = Open();
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  sqlite3_exec(db.raw,
               "DELETE FROM jobs; DELETE FROM trials; DELETE FROM workers; DELETE FROM records",
               nullptr, nullptr, nullptr);
  switch (data[0] % 4) {
    case 0: {
      Put(db.raw, "INSERT INTO jobs VALUES ('j-00000000f022', 1, 0, ?1)", body);
      auto jobs = db.store->LoadJobs();
      if (jobs.ok())
        for (const auto& j : *jobs) (void)j.spec().ShortDebugString();
      (void)db.store->LoadJob(kJob);
      break;
    }
    case 1: {
      Put(db.raw, "INSERT INTO trials VALUES ('j-00000000f022-000001', 'j-00000000f022', 1, ?1)",
          body);
      (void)db.store->LoadTrials(kJob);
      break;
    }
    case 2: {
      Put(db.raw, "INSERT INTO workers VALUES ('w-00000000f022', ?1)", body);
      (void)db.store->LoadWorkers();
      break;
    }
    default: {
      Put(db.raw, "INSERT INTO records VALUES ('gemm:M=8', 'cpu', 'k', 1, 1.0, ?1)", body);
      (void)db.store->FindRecord("gemm:M=8", "cpu", "k");
      auto top = db.store->TopRecords("gemm:M=8", "", 4);
      if (top.ok() && !top->empty()) {
        // Pretraining reads a store's records into replay sets (one per workload and chip).
        std::vector<kiln::v1::TuningRecord> twice = {top->front(), top->front()};
        twice[1].mutable_measurement()->set_median_us(twice[0].measurement().median_us() * 2);
        (void)kiln::hardware::SetsFromRecords(*top, 1);
        (void)kiln::hardware::SetsFromRecords(twice, 1);
      }
      break;
    }
  }
  return 0;
}
