// Helpers shared by the daemons: address parsing, atomic port files, SIGTERM handling.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln {

struct HostPort {
  std::string host;
  int port = 0;
};

// Parses "HOST:PORT" (PORT 0..65535; "[::1]:80" accepted). Names what is wrong on failure.
absl::StatusOr<HostPort> ParseHostPort(const std::string& text, const std::string& flag);

// Writes `content` to `path` atomically (temp file in the same folder, then rename).
absl::Status WriteFileAtomically(const std::string& path, const std::string& content);

// In builds without NDEBUG, as Debian builds absl, absl::Mutex (under gRPC) records the lock
// order whenever a lock is taken while another is held (a lock graph and stack traces) and aborts
// on a cycle it believes it found: a few percent of a busy coordinator's CPU when a fleet's
// leases arrive together. Turned off, as in absl's own release builds. Call first in main.
void DisableMutexDeadlockDetection();

// Blocks SIGTERM/SIGINT in the calling thread (call before starting threads) and returns
// when one arrives or `StopRequested()` is set by RequestStop().
int WaitForTerminationSignal();
void InstallTerminationBlock();
void RequestStop();

}  // namespace kiln
