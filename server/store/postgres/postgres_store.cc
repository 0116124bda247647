#include "server/store/postgres/postgres_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/store/postgres/pg_connection.h"

namespace kiln::server {
namespace {

constexpr int kSchemaVersion = 1;
constexpr char kLockKey[] = "1802071150";  // "kiln": one coordinator per database
constexpr int kOpenLockWaitMs = 3000;      // a restarted coordinator's old session may linger
constexpr int kReconnectLockWaitMs = 2000;

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS kiln_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, state INTEGER NOT NULL,
                                 created_ms BIGINT NOT NULL, body BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS trials (id TEXT PRIMARY KEY, job_id TEXT NOT NULL, seq BIGINT NOT NULL,
                                   body BYTEA NOT NULL);
CREATE INDEX IF NOT EXISTS trials_by_job ON trials (job_id, seq);
CREATE TABLE IF NOT EXISTS workers (id TEXT PRIMARY KEY, body BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS records (workload_key TEXT NOT NULL, chip_type TEXT NOT NULL,
                                    config_key TEXT NOT NULL, ok BOOLEAN NOT NULL,
                                    median_us DOUBLE PRECISION NOT NULL, body BYTEA NOT NULL,
                                    PRIMARY KEY (workload_key, chip_type, config_key));
CREATE INDEX IF NOT EXISTS records_best ON records (workload_key, chip_type, ok, median_us);
)sql";

// Server-side keepalives, so the lock of a coordinator whose machine vanished frees in a minute.
constexpr char kSession[] =
    "SET tcp_keepalives_idle = 30; SET tcp_keepalives_interval = 10; "
    "SET tcp_keepalives_count = 3;";

class PostgresStore final : public Store {
 public:
  // `reader`: a standby's read-only session, without the lock (it must not write).
  PostgresStore(std::unique_ptr<pg::Connection> conn, bool reader)
      : conn_(std::move(conn)), reader_(reader) {}

  absl::Status Init() {
    RETURN_IF_ERROR(StartSession(kOpenLockWaitMs));
    if (reader_) return absl::OkStatus();  // the leader creates and migrates the schema
    RETURN_IF_ERROR(conn_->ExecScript(kSchema));
    ASSIGN_OR_RETURN(pg::Result v,
                     conn_->Exec("SELECT value FROM kiln_meta WHERE key = 'schema_version'"));
    int version = v.rows() > 0 ? std::atoi(v.Value(0, 0).c_str()) : 0;
    if (version > kSchemaVersion)
      return absl::FailedPreconditionError(absl::StrCat(
          "postgresql ", conn_->target(), ": store schema version ", version,
          " is newer than this coordinator's (", kSchemaVersion, "); upgrade kiln-coordinator"));
    // Migrations from older versions go here, in one transaction with the version update.
    return Do(
        "INSERT INTO kiln_meta VALUES ('schema_version', $1) "
        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        {pg::Int(kSchemaVersion)});
  }

  absl::Status Write(const WriteBatch& b) override {
    if (reader_)
      return absl::FailedPreconditionError("a standby's read-only store session does not write");
    std::lock_guard<std::mutex> lock(mu_);
    return Run([&]() -> absl::Status {
      RETURN_IF_ERROR(conn_->ExecScript("BEGIN"));
      absl::Status s = WriteItems(b);
      if (s.ok()) s = conn_->ExecScript("COMMIT");
      if (!s.ok() && !conn_->broken()) conn_->ExecScript("ROLLBACK").IgnoreError();
      return s;
    });
  }

  absl::StatusOr<std::vector<v1::Job>> LoadJobs() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Run(
        [&] { return LoadAll<v1::Job>("SELECT body FROM jobs ORDER BY created_ms, id", {}); });
  }

  absl::StatusOr<std::vector<v1::Trial>> LoadTrials(const std::string& job_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Run([&] {
      return LoadAll<v1::Trial>("SELECT body FROM trials WHERE job_id = $1 ORDER BY seq",
                                {pg::Text(job_id)});
    });
  }

  absl::StatusOr<std::vector<v1::WorkerInfo>> LoadWorkers() override {
    std::lock_guard<std::mutex> lock(mu_);
    return Run([&] { return LoadAll<v1::WorkerInfo>("SELECT body FROM workers ORDER BY id", {}); });
  }

  absl::StatusOr<std::optional<v1::TuningRecord>> FindRecord(
      const std::string& workload_key, const std::string& chip_type,
      const std::string& config_key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Run([&]() -> absl::StatusOr<std::optional<v1::TuningRecord>> {
      ASSIGN_OR_RETURN(std::vector<v1::TuningRecord> found,
                       LoadAll<v1::TuningRecord>(
                           "SELECT body FROM records WHERE workload_key = $1 AND chip_type = $2 "
                           "AND config_key = $3",
                           {pg::Text(workload_key), pg::Text(chip_type), pg::Text(config_key)}));
      if (found.empty()) return std::optional<v1::TuningRecord>();
      return std::optional<v1::TuningRecord>(std::move(found[0]));
    });
  }

  absl::StatusOr<std::vector<uint64_t>> RecordKeyHashes(const std::string& workload_key,
                                                        const std::string& chip_type) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Run([&]() -> absl::StatusOr<std::vector<uint64_t>> {
      ASSIGN_OR_RETURN(pg::Result r, conn_->Exec("SELECT config_key FROM records WHERE "
                                                 "workload_key = $1 AND chip_type = $2",
                                                 {pg::Text(workload_key), pg::Text(chip_type)}));
      std::vector<uint64_t> out;
      out.reserve(r.rows());
      for (int i = 0; i < r.rows(); ++i) out.push_back(RecordKeyHash(r.Value(i, 0)));
      std::sort(out.begin(), out.end());
      return out;
    });
  }

  absl::StatusOr<std::vector<v1::TuningRecord>> TopRecords(const std::string& workload_key,
                                                           const std::string& chip_type,
                                                           int k) override {
    std::lock_guard<std::mutex> lock(mu_);
    return Run([&] {
      return LoadAll<v1::TuningRecord>(
          "SELECT body FROM records WHERE workload_key = $1 AND ok "
          "AND ($2::text = '' OR chip_type = $2::text) ORDER BY median_us LIMIT $3::bigint",
          {pg::Text(workload_key), pg::Text(chip_type), pg::Int(k)});
    });
  }

 private:
  // Keepalives and the advisory lock that keeps a second coordinator off this database.
  absl::Status StartSession(int lock_wait_ms) {
    RETURN_IF_ERROR(conn_->ExecScript(kSession));
    if (reader_) {
      ready_ = true;
      return absl::OkStatus();
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(lock_wait_ms);
    while (true) {
      ASSIGN_OR_RETURN(pg::Result r, conn_->Exec("SELECT pg_try_advisory_lock($1::bigint)",
                                                 {pg::Text(kLockKey)}));
      if (r.rows() == 1 && r.Value(0, 0) == "t") break;
      if (std::chrono::steady_clock::now() > deadline)
        return LeaderElsewhereError(
            absl::StrCat("postgresql ", conn_->target(),
                         ": another kiln-coordinator is using this database; stop it, or give each "
                         "coordinator its own database"));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ready_ = true;
    return absl::OkStatus();
  }

  // Runs `fn`; after a lost connection, reconnects and runs it once more. Every write is an
  // idempotent upsert, so a batch whose COMMIT went unanswered can be written again.
  template <typename Fn>
  auto Run(Fn&& fn) -> decltype(fn()) {
    if (!ready_) RETURN_IF_ERROR(Reconnect());
    auto result = fn();
    if (result.ok() || !conn_->broken()) return result;
    RETURN_IF_ERROR(Reconnect());
    return fn();
  }

  absl::Status Reconnect() {
    ready_ = false;
    if (conn_->broken()) RETURN_IF_ERROR(conn_->Reset());
    absl::Status s = StartSession(kReconnectLockWaitMs);
    if (IsLeaderElsewhere(s)) {
      // The session was lost long enough for a standby to take the lock and lead. Two leaders
      // must never write: this one leaves (a supervisor restarts it, and it stands by).
      std::fprintf(stderr,
                   "kiln-coordinator: lost the database session and another coordinator leads "
                   "now; exiting so that only one leads (started again, it stands by)\n");
      std::fflush(stderr);
      std::_Exit(3);
    }
    return s;
  }

  absl::Status Do(const char* sql, std::vector<pg::Param> params) {
    return conn_->Exec(sql, params).status();
  }

  // Each kind of row in one statement (unnest of array parameters): one round trip a table
  // rather than one a row, which had made the store the coordinator's limit on PostgreSQL.
  // Upserts see each key once (ON CONFLICT cannot update a row twice in one statement): the
  // last copy in the batch stands, as when written one after another.
  absl::Status WriteItems(const WriteBatch& b) {
    if (!b.jobs.empty()) {
      pg::Array id, state, created, body;
      for (const v1::Job* j : LastOfEach(b.jobs, [](const v1::Job& j) { return j.id(); })) {
        id.Text(j->id());
        state.Int(j->state());
        created.Int(j->created_unix_ms());
        body.Bytes(j->SerializeAsString());
      }
      RETURN_IF_ERROR(
          Do("INSERT INTO jobs SELECT * FROM unnest($1::text[], $2::integer[], $3::bigint[], "
             "$4::bytea[]) ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, "
             "created_ms = EXCLUDED.created_ms, body = EXCLUDED.body",
             {id.Build(), state.Build(), created.Build(), body.Build()}));
    }
    if (!b.trials.empty()) {
      pg::Array id, job, seq, body;
      for (const v1::Trial* t : LastOfEach(b.trials, [](const v1::Trial& t) { return t.id(); })) {
        id.Text(t->id());
        job.Text(t->job_id());
        seq.Int(t->seq());
        body.Bytes(t->SerializeAsString());
      }
      RETURN_IF_ERROR(
          Do("INSERT INTO trials SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], "
             "$4::bytea[]) ON CONFLICT (id) DO UPDATE SET job_id = EXCLUDED.job_id, "
             "seq = EXCLUDED.seq, body = EXCLUDED.body",
             {id.Build(), job.Build(), seq.Build(), body.Build()}));
    }
    if (!b.workers.empty()) {
      pg::Array id, body;
      for (const v1::WorkerInfo* w :
           LastOfEach(b.workers, [](const v1::WorkerInfo& w) { return w.id(); })) {
        id.Text(w->id());
        body.Bytes(w->SerializeAsString());
      }
      RETURN_IF_ERROR(
          Do("INSERT INTO workers SELECT * FROM unnest($1::text[], $2::bytea[]) "
             "ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body",
             {id.Build(), body.Build()}));
    }
    if (!b.records.empty()) {
      pg::Array workload, chip, config, ok, median, body;
      for (const v1::TuningRecord* r : LastOfEach(b.records, [](const v1::TuningRecord& r) {
             return absl::StrCat(r.workload_key(), "\n", r.chip_type(), "\n", r.config_key());
           })) {
        workload.Text(r->workload_key());
        chip.Text(r->chip_type());
        config.Text(r->config_key());
        ok.Bool(r->measurement().status() == v1::OK);
        median.Real(r->measurement().median_us());
        body.Bytes(r->SerializeAsString());
      }
      RETURN_IF_ERROR(
          Do("INSERT INTO records SELECT * FROM unnest($1::text[], $2::text[], $3::text[], "
             "$4::boolean[], $5::double precision[], $6::bytea[]) "
             "ON CONFLICT (workload_key, chip_type, config_key) DO UPDATE SET ok = EXCLUDED.ok, "
             "median_us = EXCLUDED.median_us, body = EXCLUDED.body",
             {workload.Build(), chip.Build(), config.Build(), ok.Build(), median.Build(),
              body.Build()}));
    }
    if (!b.removed_workers.empty()) {
      pg::Array ids;
      for (const std::string& id : b.removed_workers) ids.Text(id);
      RETURN_IF_ERROR(Do("DELETE FROM workers WHERE id = ANY($1::text[])", {ids.Build()}));
    }
    return absl::OkStatus();
  }

  // The last item of each key, in the order of their first appearance.
  template <typename T, typename Key>
  static std::vector<const T*> LastOfEach(const std::vector<T>& items, Key key) {
    std::map<std::string, size_t> at;
    std::vector<const T*> out;
    for (const T& item : items) {
      auto [it, fresh] = at.try_emplace(key(item), out.size());
      if (fresh)
        out.push_back(&item);
      else
        out[it->second] = &item;
    }
    return out;
  }

  template <typename T>
  absl::StatusOr<std::vector<T>> LoadAll(const char* sql, std::vector<pg::Param> params) {
    ASSIGN_OR_RETURN(pg::Result r, conn_->Exec(sql, params, /*binary_result=*/true));
    std::vector<T> out;
    out.reserve(r.rows());
    for (int i = 0; i < r.rows(); ++i)
      if (!out.emplace_back().ParseFromString(r.Value(i, 0)))
        return absl::DataLossError(absl::StrCat("corrupt ", T::descriptor()->name(), " in store"));
    return out;
  }

  std::mutex mu_;
  std::unique_ptr<pg::Connection> conn_;
  const bool reader_;
  bool ready_ = false;  // session set up and the lock held (a reader holds none)
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> NewPostgresStore(const std::string& uri, bool reader) {
  ASSIGN_OR_RETURN(std::unique_ptr<pg::Connection> conn, pg::Connection::Open(uri));
  auto store = std::make_unique<PostgresStore>(std::move(conn), reader);
  RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace kiln::server
