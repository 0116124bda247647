// The kiln subcommands that talk to a coordinator: submit, watch, jobs, results, cancel, workers.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "cli/client.h"
#include "cli/flags.h"

namespace kiln::cli {

// Where a command writes, and the clock it reads (injected for tests).
struct Io {
  std::ostream& out;
  std::ostream& err;
  bool err_is_tty = false;
  std::function<int64_t()> now_ms;  // wall clock, Unix milliseconds
};

int64_t WallClockMs();

// Runs a parsed remote command against inv.coordinator. Returns the exit status: 0 success,
// 1 server error or job FAILED/CANCELLED, 2 a request the coordinator refused as malformed.
int RunRemoteCommand(const Invocation& inv, Io& io);

// What SubmitAndWait prints on stdout once the job is over.
enum class WaitOutput { kResultsTable, kJobIdJson, kResultsJson };

// Submits inv.spec, shows live progress on stderr until the job ends, then prints `output`.
// Exit 0 if the job SUCCEEDED, else 1.
int SubmitAndWait(Client& client, const Invocation& inv, WaitOutput output, Io& io,
                  std::function<void(const std::string& job_id)> on_submitted = nullptr);

// Prints "kiln: <description>" for a failed call; returns 2 when the coordinator refused the
// request as malformed (INVALID_ARGUMENT: a usage error, as the command line's own), else 1.
int ReportError(const absl::Status& status, const std::string& address, Io& io);

}  // namespace kiln::cli
