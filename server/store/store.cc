#include "server/store/store.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "server/store/sqlite/sqlite_store.h"
#ifdef KILN_WITH_POSTGRES
#include "server/store/postgres/postgres_store.h"
#endif

namespace kiln::server {

namespace {
constexpr char kLeaderElsewhere[] = "kiln.dev/leader-elsewhere";
}  // namespace

absl::Status LeaderElsewhereError(const std::string& message) {
  absl::Status s = absl::FailedPreconditionError(message);
  s.SetPayload(kLeaderElsewhere, absl::Cord("1"));
  return s;
}

bool IsLeaderElsewhere(const absl::Status& status) {
  return status.GetPayload(kLeaderElsewhere).has_value();
}

bool IsPostgresSpec(const std::string& spec) {
  return absl::StartsWith(spec, "postgresql://") || absl::StartsWith(spec, "postgres://");
}

std::string RedactStoreSpec(const std::string& spec) {
  if (!IsPostgresSpec(spec)) return spec;
  std::string out = spec;
  size_t scheme = out.find("://") + 3;
  size_t at = out.find('@', scheme);
  size_t colon = out.find(':', scheme);
  if (at != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
  for (size_t p = out.find("password="); p != std::string::npos; p = out.find("password=", p)) {
    p += 9;
    size_t end = out.find('&', p);
    out.replace(p, end == std::string::npos ? std::string::npos : end - p, "***");
  }
  return out;
}

WriteBatch MergeBatches(std::vector<WriteBatch> batches) {
  if (batches.size() == 1) return std::move(batches[0]);
  // Position of each id's latest copy in the merged batch.
  std::map<std::string, size_t> job_at, trial_at, worker_at, record_at;
  std::set<std::string> removed;
  WriteBatch out;
  auto keep_last = [](auto& items, std::map<std::string, size_t>& at, std::string key,
                      auto&& item) {
    auto [it, fresh] = at.try_emplace(std::move(key), items.size());
    if (fresh) {
      items.push_back(std::move(item));
    } else {
      items[it->second] = std::move(item);
    }
  };
  for (WriteBatch& b : batches) {
    for (v1::Job& j : b.jobs) keep_last(out.jobs, job_at, j.id(), std::move(j));
    for (v1::Trial& t : b.trials) keep_last(out.trials, trial_at, t.id(), std::move(t));
    for (v1::TuningRecord& r : b.records)
      keep_last(out.records, record_at,
                absl::StrCat(r.workload_key(), "\n", r.chip_type(), "\n", r.config_key()),
                std::move(r));
    for (v1::WorkerInfo& w : b.workers) {
      removed.erase(w.id());
      keep_last(out.workers, worker_at, w.id(), std::move(w));
    }
    for (std::string& id : b.removed_workers) {
      // Removed after its registration: the removal stands (removals are written last).
      removed.insert(std::move(id));
    }
  }
  out.removed_workers.assign(removed.begin(), removed.end());
  return out;
}

absl::StatusOr<std::vector<uint64_t>> Store::RecordKeyHashes(const std::string&,
                                                             const std::string&) {
  return absl::UnimplementedError("RecordKeyHashes");
}

uint64_t RecordKeyHash(std::string_view config_key) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : config_key) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

absl::StatusOr<std::optional<v1::Job>> Store::LoadJob(const std::string& job_id) {
  ASSIGN_OR_RETURN(std::vector<v1::Job> jobs, LoadJobs());
  for (auto& j : jobs)
    if (j.id() == job_id) return std::optional<v1::Job>(std::move(j));
  return std::optional<v1::Job>();
}

absl::StatusOr<std::unique_ptr<Store>> OpenStoreReader(const std::string& spec) {
  if (!IsPostgresSpec(spec))
    return absl::UnimplementedError("only a PostgreSQL store has standbys that read it");
#ifdef KILN_WITH_POSTGRES
  return NewPostgresStore(spec, /*reader=*/true);
#else
  return absl::UnimplementedError("built without PostgreSQL");
#endif
}

absl::StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& spec,
                                                 const std::string& data_dir) {
  if (IsPostgresSpec(spec)) {
#ifdef KILN_WITH_POSTGRES
    return NewPostgresStore(spec);
#else
    return absl::UnimplementedError(
        "--store: this coordinator was built without PostgreSQL (libpq-dev was missing or "
        "KILN_WITH_POSTGRES=OFF); install libpq-dev and rebuild, or use sqlite:PATH");
#endif
  }
  std::string path = spec;
  if (absl::StartsWith(path, "sqlite:")) path = path.substr(7);
  if (path.empty()) {
    if (mkdir(data_dir.c_str(), 0755) != 0 && errno != EEXIST)
      return absl::UnavailableError(
          absl::StrCat("--data-dir: cannot create ", data_dir, ": ", strerror(errno)));
    path = data_dir + "/kiln.db";
  }
  return NewSqliteStore(path);
}

}  // namespace kiln::server
