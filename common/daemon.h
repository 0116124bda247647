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

// absl::Mutex, under gRPC, checks the lock order on every acquisition (stack traces and a lock
// graph) in builds without NDEBUG, as Debian builds absl, and aborts on a cycle it believes it
// found: a few percent of a busy daemon's CPU. Turned off, as in absl's own release builds.
// Call first in main.
void DisableMutexDeadlockDetection();

// Blocks SIGTERM/SIGINT in the calling thread (call before starting threads) and returns
// when one arrives or `StopRequested()` is set by RequestStop().
int WaitForTerminationSignal();
void InstallTerminationBlock();
void RequestStop();

}  // namespace kiln
