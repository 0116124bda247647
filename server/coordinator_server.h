// Starts a complete coordinator (store, core, gRPC services, metrics) in this process.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::server {

struct CoordinatorOptions {
  std::string listen = "127.0.0.1:50051";  // HOST:PORT; port 0 picks a free one
  std::string data_dir = "./kiln-data";
  // Where `--strategy policy:NAME` finds NAME (or NAME.pt); empty: DATA_DIR/checkpoints.
  std::string checkpoint_dir;
  std::string store;  // "sqlite:PATH" (default DATA_DIR/kiln.db) | "postgresql://..."
  std::string metrics_listen = "127.0.0.1:9464";  // empty: no metrics endpoint
  std::string port_file;                          // written atomically with the bound port
  // TLS and role tokens (docs/security.md): PEM files, and the tokens file (ROLE NAME SHA256).
  // A --listen beyond loopback needs tls_cert and tokens, unless `insecure`.
  std::string tls_cert, tls_key, tls_client_ca, tokens;
  bool insecure = false;
  int lease_ttl_ms = 20000;  // a lease without heartbeats for this long is requeued
  int heartbeat_interval_ms = 2000;
  bool racing = true;    // tuning trials stop timing once surely slower than the task's best
  int final_rounds = 3;  // CoreOptions::final_rounds (0: off)
  int finalists = 3;
  bool quiet = false;  // no log lines on stderr
  // CoreOptions::worker_purge_after_ms and job_retention_ms (0: never / keep all).
  int64_t worker_purge_after_ms = 3600 * 1000;
  int64_t job_retention_ms = int64_t{7} * 24 * 3600 * 1000;
  // Open WatchJob streams: at most this many per caller name (anonymous callers share one
  // name) and in all; past either, RESOURCE_EXHAUSTED. Each holds its job's pending events.
  int max_watch_streams_per_caller = 64;
  int max_watch_streams = 256;
};

class RunningCoordinator {
 public:
  virtual ~RunningCoordinator() = default;
  virtual std::string address() const = 0;  // "127.0.0.1:PORT", the bound address
  virtual int metrics_port() const = 0;     // 0 when disabled
  virtual void Shutdown() = 0;              // stops serving; idempotent
  // True while another coordinator leads on the same PostgreSQL database: this one answers
  // every call UNAVAILABLE (its health check NOT_SERVING) and takes over when the leader's
  // session ends (kill, crash or network: PostgreSQL frees its lock).
  virtual bool standby() const = 0;
};

absl::StatusOr<std::unique_ptr<RunningCoordinator>> StartCoordinator(const CoordinatorOptions& o);

}  // namespace kiln::server
