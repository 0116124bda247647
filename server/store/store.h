// The Store extension point: jobs, trials, workers and tuning records, written atomically.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/v1/types.pb.h"

namespace kiln::server {

// Everything one coordinator step changes; Store::Write applies it all or nothing.
struct WriteBatch {
  std::vector<v1::Job> jobs;
  std::vector<v1::Trial> trials;
  std::vector<v1::WorkerInfo> workers;
  std::vector<v1::TuningRecord> records;
  std::vector<std::string> removed_workers;  // ids of workers deleted (purged after silence)
  bool empty() const {
    return jobs.empty() && trials.empty() && workers.empty() && records.empty() &&
           removed_workers.empty();
  }
};

// The batches as one, to be written in one transaction with the same effect as writing them in
// order: of the jobs, trials and records written more than once the last copy stands, and a
// worker removed and registered again (or the reverse) ends as the later batch left it.
WriteBatch MergeBatches(std::vector<WriteBatch> batches);

class Store {
 public:
  virtual ~Store() = default;
  // Upserts every item of the batch in one transaction.
  virtual absl::Status Write(const WriteBatch& batch) = 0;
  virtual absl::StatusOr<std::vector<v1::Job>> LoadJobs() = 0;
  // One job, or nullopt when the store has none of that id. The default scans LoadJobs().
  virtual absl::StatusOr<std::optional<v1::Job>> LoadJob(const std::string& job_id);
  virtual absl::StatusOr<std::vector<v1::Trial>> LoadTrials(const std::string& job_id) = 0;
  virtual absl::StatusOr<std::vector<v1::WorkerInfo>> LoadWorkers() = 0;
  // The record of this exact (workload, chip type, config), if one was measured.
  virtual absl::StatusOr<std::optional<v1::TuningRecord>> FindRecord(
      const std::string& workload_key, const std::string& chip_type,
      const std::string& config_key) = 0;
  // RecordKeyHash of the config key of every record of a workload on a chip type, sorted: a task
  // reads them once, and looks up (FindRecord) only the proposals whose hash is there, not every
  // proposal (each lookup is a round trip to PostgreSQL). Eight bytes a record, however long the
  // workload's history: a set of the keys themselves grew the coordinator by megabytes a job. The
  // default: UNIMPLEMENTED (every proposal is looked up).
  virtual absl::StatusOr<std::vector<uint64_t>> RecordKeyHashes(const std::string& workload_key,
                                                                const std::string& chip_type);
  // The k fastest OK records for a workload on a chip type (any chip type when empty).
  virtual absl::StatusOr<std::vector<v1::TuningRecord>> TopRecords(const std::string& workload_key,
                                                                   const std::string& chip_type,
                                                                   int k) = 0;
};

// "sqlite:PATH", a plain path, "" (DATA_DIR/kiln.db), or a PostgreSQL URI
// "postgresql://USER@HOST:PORT/DB" (UNIMPLEMENTED when built without KILN_WITH_POSTGRES).
absl::StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& spec,
                                                 const std::string& data_dir);

// A standby's read-only view of a shared store, open while another coordinator leads it
// (PostgreSQL only; UNIMPLEMENTED for SQLite, whose data dir one coordinator owns).
absl::StatusOr<std::unique_ptr<Store>> OpenStoreReader(const std::string& spec);

bool IsPostgresSpec(const std::string& spec);
// A shared store that another coordinator leads (PostgreSQL's advisory lock is held): this one
// may stand by (server/coordinator_server.h). The error says so; IsLeaderElsewhere recognizes it.
absl::Status LeaderElsewhereError(const std::string& message);
bool IsLeaderElsewhere(const absl::Status& status);
// The spec with any password replaced by "***", for logs and messages.
std::string RedactStoreSpec(const std::string& spec);

// A stable 64-bit hash of a config key (FNV-1a): the same in every process and store. A
// collision only costs a FindRecord that finds nothing.
uint64_t RecordKeyHash(std::string_view config_key);

}  // namespace kiln::server
