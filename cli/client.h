// RPC plumbing of the kiln client: TuningService calls with deadlines, and a reconnecting watch.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/client_auth.h"
#include "common/leader_follower.h"
#include "kiln/v1/tuning_service.grpc.pb.h"

namespace kiln::cli {

struct WatchCallbacks {
  std::function<void(const v1::JobEvent&)> on_event;
  std::function<void(const std::string&)> on_notice;  // "connection lost; reconnecting ..."
  int initial_backoff_ms = 250;
  int max_backoff_ms = 4000;
  int give_up_after_ms = 10 * 60 * 1000;  // of continuous failure
};

class Client {
 public:
  // `address`: HOST:PORT, or a comma-separated list of a leading coordinator and its standbys
  // (calls follow the leader: an UNAVAILABLE answer moves on to the next address, for up to
  // kFailoverWaitMs when every address fails). `auth`: TLS and the bearer token (--tls-ca,
  // --token-file); default plaintext, no token.
  explicit Client(std::string address, int deadline_seconds = 30, ClientAuth auth = {});
  static constexpr int kFailoverWaitMs = 30000;

  const std::string& address() const { return address_; }

  absl::StatusOr<std::string> SubmitJob(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  absl::StatusOr<std::vector<v1::Job>> ListJobs();
  absl::StatusOr<v1::JobState> CancelJob(const std::string& job_id);
  absl::StatusOr<v1::GetResultsResponse> GetResults(const std::string& job_id);
  absl::StatusOr<v1::ExportKernelsResponse> ExportKernels(const std::string& job_id);
  absl::StatusOr<std::vector<v1::WorkerInfo>> ListWorkers();
  // The tuning database's fastest records of `workload` on `chip_type` (exact; "" = any).
  absl::StatusOr<std::vector<v1::TuningRecord>> LookupBest(const v1::Workload& workload,
                                                           const std::string& chip_type, int k);

  // Follows the job's events until it reaches a terminal state and returns that snapshot. When
  // the stream breaks after it was established (e.g. the coordinator restarts) it reconnects
  // with exponential backoff (a coordinator unreachable at the start is an error at once).
  // The first event passed on is a snapshot from GetJob; replayed events older than what was
  // already passed on are skipped.
  absl::StatusOr<v1::Job> Watch(const std::string& job_id, const WatchCallbacks& callbacks);

 private:
  void Prepare(grpc::ClientContext* context) const;
  // One unary call of the stub's `method` with a prepared context.
  template <typename Request, typename Response>
  absl::StatusOr<Response> Unary(grpc::Status (v1::TuningService::Stub::*method)(
                                     grpc::ClientContext*, const Request&, Response*),
                                 const Request& request);

  std::string address_;
  int deadline_seconds_;
  ClientAuth auth_;
  LeaderFollower<v1::TuningService> coordinators_;
};

// The user-facing text (without the "kiln: " prefix) of a failed call to the coordinator at
// `address`: "CODE: message", or for UNAVAILABLE "cannot reach the coordinator at ADDR (...)".
std::string DescribeError(const absl::Status& status, const std::string& address);

}  // namespace kiln::cli
