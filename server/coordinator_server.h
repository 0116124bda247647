// Starts a complete coordinator (store, core, gRPC services, metrics) in this process.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::server {

struct CoordinatorOptions {
  std::string listen = "127.0.0.1:50051";  // HOST:PORT; port 0 picks a free one
  std::string data_dir = "./kiln-data";
  std::string store;  // "sqlite:PATH" (default DATA_DIR/kiln.db) | "postgresql://..."
  std::string metrics_listen = "0.0.0.0:9464";  // empty: no metrics endpoint
  std::string port_file;                        // written atomically with the bound port
  int lease_ttl_ms = 20000;  // a lease without heartbeats for this long is requeued
  int heartbeat_interval_ms = 2000;
  bool racing = true;    // tuning trials stop timing once surely slower than the task's best
  int final_rounds = 3;  // CoreOptions::final_rounds (0: off)
  int finalists = 3;
  bool quiet = false;  // no log lines on stderr
};

class RunningCoordinator {
 public:
  virtual ~RunningCoordinator() = default;
  virtual std::string address() const = 0;  // "127.0.0.1:PORT", the bound address
  virtual int metrics_port() const = 0;     // 0 when disabled
  virtual void Shutdown() = 0;              // stops serving; idempotent
};

absl::StatusOr<std::unique_ptr<RunningCoordinator>> StartCoordinator(const CoordinatorOptions& o);

}  // namespace kiln::server
