// A Store that forwards every call to another: tests derive from it and override what they
// make fail or wait (a full disk, a slow write).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/store/store.h"

namespace kiln::server::testing {

class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}

  absl::Status Write(const WriteBatch& b) override { return inner_->Write(b); }
  absl::StatusOr<std::vector<v1::Job>> LoadJobs() override { return inner_->LoadJobs(); }
  absl::StatusOr<std::optional<v1::Job>> LoadJob(const std::string& id) override {
    return inner_->LoadJob(id);
  }
  absl::StatusOr<std::vector<v1::Trial>> LoadTrials(const std::string& id) override {
    return inner_->LoadTrials(id);
  }
  absl::StatusOr<std::vector<v1::WorkerInfo>> LoadWorkers() override {
    return inner_->LoadWorkers();
  }
  absl::StatusOr<std::optional<v1::TuningRecord>> FindRecord(const std::string& w,
                                                             const std::string& c,
                                                             const std::string& k) override {
    return inner_->FindRecord(w, c, k);
  }
  absl::StatusOr<std::vector<uint64_t>> RecordKeyHashes(const std::string& w,
                                                        const std::string& c) override {
    return inner_->RecordKeyHashes(w, c);
  }
  absl::StatusOr<std::vector<v1::TuningRecord>> TopRecords(const std::string& w,
                                                           const std::string& c, int k) override {
    return inner_->TopRecords(w, c, k);
  }

 protected:
  Store& inner() { return *inner_; }

 private:
  std::unique_ptr<Store> inner_;
};

}  // namespace kiln::server::testing
