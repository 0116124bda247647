// Thin, final gRPC adapters over the Coordinator core: TuningService and WorkerService.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <string>

#include "kiln/v1/tuning_service.grpc.pb.h"
#include "kiln/v1/worker_service.grpc.pb.h"
#include "server/authenticator.h"
#include "server/coordinator.h"
#include "server/metrics.h"

namespace kiln::server {

// WatchJob is served with gRPC's callback API: a stream waiting for events holds no thread.
class TuningServiceImpl final
    : public v1::TuningService::WithCallbackMethod_WatchJob<v1::TuningService::Service> {
 public:
  // `auth` null: no credentials checked (every caller is an anonymous admin).
  // `core` null: a standby, every call UNAVAILABLE until Activate.
  TuningServiceImpl(Coordinator* core, CoordinatorMetrics* metrics,
                    const Authenticator* auth = nullptr)
      : core_(core), metrics_(metrics), auth_(auth) {}
  void Activate(Coordinator* core) { core_ = core; }
  // A standby's read-only core over the leader's store: until Activate, GetJob, ListJobs,
  // GetResults and LookupBest answer from it; every other call is UNAVAILABLE.
  void SetReader(Coordinator* reader) { reader_ = reader; }
  void Stop() { stopping_ = true; }
  // Caps open WatchJob streams (each holds its job's events while it writes): per caller name
  // (anonymous callers share "") and in all.
  void SetWatchLimits(int per_caller, int total);

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*,
                         v1::SubmitJobResponse*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::Job*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse*) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext*,
                                                   const v1::WatchJobRequest*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*,
                         v1::CancelJobResponse*) override;
  grpc::Status GetResults(grpc::ServerContext*, const v1::GetResultsRequest*,
                          v1::GetResultsResponse*) override;
  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse*) override;
  grpc::Status LookupBest(grpc::ServerContext*, const v1::LookupBestRequest*,
                          v1::LookupBestResponse*) override;
  grpc::Status ExportKernels(grpc::ServerContext*, const v1::ExportKernelsRequest*,
                             v1::ExportKernelsResponse*) override;

 private:
  // OK when the caller may use job `job_id` (its own, or any for admin); counts refusals.
  absl::Status CheckOwner(grpc::ServerContext* ctx, const std::string& job_id);
  absl::Status CheckOwnerOf(const Caller& caller, const std::string& job_id);

  Coordinator* core() const { return core_.load(); }
  // What reads are served from: the core, else a standby's reader (null: neither).
  Coordinator* reads() const {
    Coordinator* c = core_.load();
    return c ? c : reader_.load();
  }
  std::atomic<Coordinator*> core_;
  std::atomic<Coordinator*> reader_{nullptr};
  CoordinatorMetrics* metrics_;
  const Authenticator* auth_;
  std::atomic<bool> stopping_{false};
  // A WatchJob stream's place under the caps, or RESOURCE_EXHAUSTED; LeaveWatch gives it back.
  absl::Status EnterWatch(const std::string& caller);
  void LeaveWatch(const std::string& caller);
  std::mutex watch_mu_;
  std::map<std::string, int> watchers_;  // open streams by caller name
  int watchers_total_ = 0;
  int max_watch_per_caller_ = 64;
  int max_watch_total_ = 256;
};

// LeaseTrials and ReportResults are served with gRPC's callback API: a long-poll waiting for
// work, or a call waiting for its write to be stored, holds no thread.
class WorkerServiceImpl final
    : public v1::WorkerService::WithCallbackMethod_LeaseTrials<
          v1::WorkerService::WithCallbackMethod_ReportResults<v1::WorkerService::Service>> {
 public:
  WorkerServiceImpl(Coordinator* core, CoordinatorMetrics* metrics,
                    const Authenticator* auth = nullptr)
      : core_(core), metrics_(metrics), auth_(auth) {}
  void Activate(Coordinator* core) { core_ = core; }

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest*,
                        v1::RegisterResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse*) override;
  grpc::ServerUnaryReactor* LeaseTrials(grpc::CallbackServerContext*, const v1::LeaseTrialsRequest*,
                                        v1::LeaseTrialsResponse*) override;
  grpc::ServerUnaryReactor* ReportResults(grpc::CallbackServerContext*,
                                          const v1::ReportResultsRequest*,
                                          v1::ReportResultsResponse*) override;
  grpc::Status ReleaseTrials(grpc::ServerContext*, const v1::ReleaseTrialsRequest*,
                             v1::ReleaseTrialsResponse*) override;
  grpc::Status Deregister(grpc::ServerContext*, const v1::DeregisterRequest*,
                          v1::DeregisterResponse*) override;

 private:
  Coordinator* core() const { return core_.load(); }
  std::atomic<Coordinator*> core_;
  CoordinatorMetrics* metrics_;
  const Authenticator* auth_;
};

}  // namespace kiln::server
