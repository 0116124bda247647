#include "server/store/sqlite/sqlite_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace kiln::server {
namespace {

constexpr int kSchemaVersion = 1;
constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, state INTEGER NOT NULL,
                                 created_ms INTEGER NOT NULL, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS trials (id TEXT PRIMARY KEY, job_id TEXT NOT NULL, seq INTEGER NOT NULL,
                                   body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS trials_by_job ON trials(job_id, seq);
CREATE TABLE IF NOT EXISTS workers (id TEXT PRIMARY KEY, body BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS records (workload_key TEXT NOT NULL, chip_type TEXT NOT NULL,
                                    config_key TEXT NOT NULL, ok INTEGER NOT NULL,
                                    median_us REAL NOT NULL, body BLOB NOT NULL,
                                    PRIMARY KEY (workload_key, chip_type, config_key));
CREATE INDEX IF NOT EXISTS records_best ON records(workload_key, chip_type, ok, median_us);
)sql";

// One prepared statement: its own, finalized on scope exit, or one of the store's cached
// statements (SqliteStore::Cached), reset on scope exit for its next use.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  explicit Stmt(sqlite3_stmt* cached) : s_(cached), rc_(cached ? SQLITE_OK : SQLITE_ERROR) {
    borrowed_ = true;
  }
  ~Stmt() {
    if (!borrowed_) {
      sqlite3_finalize(s_);
    } else if (s_) {
      sqlite3_reset(s_);
      sqlite3_clear_bindings(s_);
    }
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return s_; }
  void Text(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), v.size(), SQLITE_TRANSIENT);
  }
  void Int(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void Real(int i, double v) { sqlite3_bind_double(s_, i, v); }
  void Blob(int i, const std::string& v) {
    sqlite3_bind_blob(s_, i, v.data(), v.size(), SQLITE_TRANSIENT);
  }
  int Step() { return sqlite3_step(s_); }
  std::string ColumnBlob(int i) {
    auto* p = static_cast<const char*>(sqlite3_column_blob(s_, i));
    return p ? std::string(p, sqlite3_column_bytes(s_, i)) : std::string();
  }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_;
  bool borrowed_ = false;
};

class SqliteStore final : public Store {
 public:
  explicit SqliteStore(sqlite3* db) : db_(db) {}
  ~SqliteStore() override {
    for (auto& [sql, stmt] : cached_) sqlite3_finalize(stmt);
    sqlite3_close(db_);
  }

  absl::Status Init() {
    RETURN_IF_ERROR(
        Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;"));
    RETURN_IF_ERROR(Exec(kSchema));
    Stmt v(db_, "PRAGMA user_version");
    int version = v.Step() == SQLITE_ROW ? sqlite3_column_int(v.get(), 0) : 0;
    if (version > kSchemaVersion)
      return absl::FailedPreconditionError(
          absl::StrCat("store schema version ", version, " is newer than this coordinator's (",
                       kSchemaVersion, "); upgrade kiln-coordinator"));
    return Exec(absl::StrCat("PRAGMA user_version=", kSchemaVersion));
  }

  absl::Status Write(const WriteBatch& b) override {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    absl::Status s = WriteLocked(b);
    if (!s.ok()) {
      Exec("ROLLBACK").IgnoreError();
      return s;
    }
    s = Exec("COMMIT");
    // A COMMIT that fails (SQLITE_FULL, SQLITE_IOERR, SQLITE_BUSY) may leave the transaction
    // open; left so, the next batch would commit this one with it after the caller was told it
    // failed. Roll it back so that a failed Write changed nothing.
    if (!s.ok() && !sqlite3_get_autocommit(db_)) Exec("ROLLBACK").IgnoreError();
    return s;
  }

  absl::StatusOr<std::optional<v1::Job>> LoadJob(const std::string& job_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    ASSIGN_OR_RETURN(std::vector<v1::Job> jobs,
                     LoadAll<v1::Job>("SELECT body FROM jobs WHERE id=?1", &job_id));
    if (jobs.empty()) return std::optional<v1::Job>();
    return std::optional<v1::Job>(std::move(jobs[0]));
  }

  absl::StatusOr<std::vector<v1::Job>> LoadJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    return LoadAll<v1::Job>("SELECT body FROM jobs ORDER BY created_ms, id", nullptr);
  }

  absl::StatusOr<std::vector<v1::Trial>> LoadTrials(const std::string& job_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    return LoadAll<v1::Trial>("SELECT body FROM trials WHERE job_id=?1 ORDER BY seq", &job_id);
  }

  absl::StatusOr<std::vector<v1::WorkerInfo>> LoadWorkers() override {
    std::lock_guard<std::mutex> lock(mu_);
    return LoadAll<v1::WorkerInfo>("SELECT body FROM workers ORDER BY id", nullptr);
  }

  absl::StatusOr<std::optional<v1::TuningRecord>> FindRecord(
      const std::string& workload_key, const std::string& chip_type,
      const std::string& config_key) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt s(Cached(
        "SELECT body FROM records WHERE workload_key=?1 AND chip_type=?2 AND config_key=?3"));
    if (!s.ok()) return Error("prepare FindRecord");
    s.Text(1, workload_key);
    s.Text(2, chip_type);
    s.Text(3, config_key);
    if (s.Step() != SQLITE_ROW) return std::optional<v1::TuningRecord>();
    v1::TuningRecord r;
    if (!r.ParseFromString(s.ColumnBlob(0))) return absl::DataLossError("corrupt record in store");
    return std::optional<v1::TuningRecord>(std::move(r));
  }

  absl::StatusOr<std::vector<uint64_t>> RecordKeyHashes(const std::string& workload_key,
                                                        const std::string& chip_type) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt s(db_, "SELECT config_key FROM records WHERE workload_key=?1 AND chip_type=?2");
    if (!s.ok()) return Error("prepare RecordKeyHashes");
    s.Text(1, workload_key);
    s.Text(2, chip_type);
    std::vector<uint64_t> out;
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) out.push_back(RecordKeyHash(s.ColumnBlob(0)));
    if (rc != SQLITE_DONE) return Error("RecordKeyHashes");
    std::sort(out.begin(), out.end());
    return out;
  }

  absl::StatusOr<std::vector<v1::TuningRecord>> TopRecords(const std::string& workload_key,
                                                           const std::string& chip_type,
                                                           int k) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt s(db_,
           "SELECT body FROM records WHERE workload_key=?1 AND ok=1 AND (?2='' OR chip_type=?2) "
           "ORDER BY median_us LIMIT ?3");
    if (!s.ok()) return Error("prepare TopRecords");
    s.Text(1, workload_key);
    s.Text(2, chip_type);
    s.Int(3, k);
    std::vector<v1::TuningRecord> out;
    while (s.Step() == SQLITE_ROW) {
      if (!out.emplace_back().ParseFromString(s.ColumnBlob(0)))
        return absl::DataLossError("corrupt record in store");
    }
    return out;
  }

 private:
  absl::Status Exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      return absl::UnavailableError(absl::StrCat("sqlite: ", msg));
    }
    return absl::OkStatus();
  }

  absl::Status Error(const char* what) {
    return absl::UnavailableError(absl::StrCat("sqlite ", what, ": ", sqlite3_errmsg(db_)));
  }

  // The statement for `sql` (a string literal: cached by its address), prepared once: a trial's
  // writes and record lookup are the coordinator's most frequent statements, and preparing each
  // anew cost more than running it.
  sqlite3_stmt* Cached(const char* sql) {
    auto [it, fresh] = cached_.try_emplace(sql, nullptr);
    if (fresh && sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &it->second,
                                    nullptr) != SQLITE_OK) {
      sqlite3_finalize(it->second);
      cached_.erase(it);
      return nullptr;
    }
    return it->second;
  }

  absl::Status Put(const char* sql, const std::function<void(Stmt&)>& bind) {
    Stmt s(Cached(sql));
    if (!s.ok()) return Error("prepare");
    bind(s);
    if (s.Step() != SQLITE_DONE) return Error("write");
    return absl::OkStatus();
  }

  absl::Status WriteLocked(const WriteBatch& b) {
    for (const auto& j : b.jobs)
      RETURN_IF_ERROR(Put("INSERT OR REPLACE INTO jobs VALUES (?1, ?2, ?3, ?4)", [&](Stmt& s) {
        s.Text(1, j.id());
        s.Int(2, j.state());
        s.Int(3, j.created_unix_ms());
        s.Blob(4, j.SerializeAsString());
      }));
    for (const auto& t : b.trials)
      RETURN_IF_ERROR(Put("INSERT OR REPLACE INTO trials VALUES (?1, ?2, ?3, ?4)", [&](Stmt& s) {
        s.Text(1, t.id());
        s.Text(2, t.job_id());
        s.Int(3, t.seq());
        s.Blob(4, t.SerializeAsString());
      }));
    for (const auto& w : b.workers)
      RETURN_IF_ERROR(Put("INSERT OR REPLACE INTO workers VALUES (?1, ?2)", [&](Stmt& s) {
        s.Text(1, w.id());
        s.Blob(2, w.SerializeAsString());
      }));
    for (const auto& r : b.records)
      RETURN_IF_ERROR(
          Put("INSERT OR REPLACE INTO records VALUES (?1, ?2, ?3, ?4, ?5, ?6)", [&](Stmt& s) {
            s.Text(1, r.workload_key());
            s.Text(2, r.chip_type());
            s.Text(3, r.config_key());
            s.Int(4, r.measurement().status() == v1::OK ? 1 : 0);
            s.Real(5, r.measurement().median_us());
            s.Blob(6, r.SerializeAsString());
          }));
    for (const auto& id : b.removed_workers)
      RETURN_IF_ERROR(Put("DELETE FROM workers WHERE id=?1", [&](Stmt& s) { s.Text(1, id); }));
    return absl::OkStatus();
  }

  template <typename T>
  absl::StatusOr<std::vector<T>> LoadAll(const char* sql, const std::string* arg) {
    Stmt s(db_, sql);
    if (!s.ok()) return Error("prepare load");
    if (arg) s.Text(1, *arg);
    std::vector<T> out;
    int rc;
    while ((rc = s.Step()) == SQLITE_ROW) {
      if (!out.emplace_back().ParseFromString(s.ColumnBlob(0)))
        return absl::DataLossError(absl::StrCat("corrupt ", T::descriptor()->name(), " in store"));
    }
    if (rc != SQLITE_DONE) return Error("load");
    return out;
  }

  std::mutex mu_;
  sqlite3* db_;
  std::map<const char*, sqlite3_stmt*> cached_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> NewSqliteStore(const std::string& path) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("cannot open SQLite store ", path, ": ", msg));
  }
  auto store = std::make_unique<SqliteStore>(db);
  auto status = store->Init();
  if (!status.ok()) return absl::Status(status.code(), absl::StrCat(path, ": ", status.message()));
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace kiln::server
