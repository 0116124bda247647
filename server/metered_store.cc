#include "server/metered_store.h"

#include <chrono>

namespace kiln::server {
namespace {

class MeteredStore final : public Store {
 public:
  MeteredStore(std::unique_ptr<Store> inner, CoordinatorMetrics* metrics)
      : inner_(std::move(inner)), metrics_(metrics) {}

  absl::Status Write(const WriteBatch& batch) override {
    return Timed("write", [&] { return inner_->Write(batch); });
  }
  absl::StatusOr<std::vector<v1::Job>> LoadJobs() override {
    return Timed("load_jobs", [&] { return inner_->LoadJobs(); });
  }
  absl::StatusOr<std::optional<v1::Job>> LoadJob(const std::string& job_id) override {
    return Timed("load_job", [&] { return inner_->LoadJob(job_id); });
  }
  absl::StatusOr<std::vector<v1::Trial>> LoadTrials(const std::string& job_id) override {
    return Timed("load_trials", [&] { return inner_->LoadTrials(job_id); });
  }
  absl::StatusOr<std::vector<v1::WorkerInfo>> LoadWorkers() override {
    return Timed("load_workers", [&] { return inner_->LoadWorkers(); });
  }
  absl::StatusOr<std::optional<v1::TuningRecord>> FindRecord(
      const std::string& workload_key, const std::string& chip_type,
      const std::string& config_key) override {
    return Timed("find_record",
                 [&] { return inner_->FindRecord(workload_key, chip_type, config_key); });
  }
  absl::StatusOr<std::vector<uint64_t>> RecordKeyHashes(const std::string& workload_key,
                                                        const std::string& chip_type) override {
    return Timed("record_key_hashes",
                 [&] { return inner_->RecordKeyHashes(workload_key, chip_type); });
  }
  absl::StatusOr<std::vector<v1::TuningRecord>> TopRecords(const std::string& workload_key,
                                                           const std::string& chip_type,
                                                           int k) override {
    return Timed("top_records", [&] { return inner_->TopRecords(workload_key, chip_type, k); });
  }

 private:
  static bool Ok(const absl::Status& s) { return s.ok(); }
  template <typename T>
  static bool Ok(const absl::StatusOr<T>& s) {
    return s.ok();
  }

  template <typename Fn>
  auto Timed(const char* op, Fn&& fn) -> decltype(fn()) {
    auto start = std::chrono::steady_clock::now();
    auto result = fn();
    metrics_->StoreOperation(
        op, Ok(result),
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return result;
  }

  std::unique_ptr<Store> inner_;
  CoordinatorMetrics* metrics_;
};

}  // namespace

std::unique_ptr<Store> NewMeteredStore(std::unique_ptr<Store> inner, CoordinatorMetrics* metrics) {
  if (!metrics) return inner;
  return std::make_unique<MeteredStore>(std::move(inner), metrics);
}

}  // namespace kiln::server
