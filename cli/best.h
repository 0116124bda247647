// `kiln best` and `kiln export --best`: the tuning database's best known kernel of a workload on
// the chip types that start with a prefix (LookupBest), for deploy-time lookups without a job id.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "kiln/v1/types.pb.h"

namespace kiln::cli {

// The fastest OK record of `workload` on each chip type that starts with `prefix`, fastest
// first (the coordinator matches chip types exactly; the prefix is applied here, as jobs apply
// theirs).
absl::StatusOr<std::vector<v1::TuningRecord>> BestPerChipType(Client& client,
                                                              const v1::Workload& workload,
                                                              const std::string& prefix);

// The text `kiln best` prints: the best record in full (config, median in µs, GFLOP/s, job,
// chip type) and one line per other chip type.
std::string FormatBest(const std::vector<v1::TuningRecord>& records, const std::string& prefix);
// {"workload", "chip", "best": RECORD or null, "by_chip_type": [RECORD...]}, RECORD being
// {"chip_type", "chip_model", "config", "config_key", "median_us", "p10_us", "p90_us",
// "gflops", "job_id", "created_unix_ms", "source_hash", "toolchain"}.
std::string BestJson(const v1::Workload& workload, const std::string& prefix,
                     const std::vector<v1::TuningRecord>& records);

// kiln best: 0 when a kernel is known, 1 when none is (a message on stderr) or the call failed.
int RunBest(Client& client, const Invocation& inv, Io& io);
// kiln export --best: exports the best known kernel through its job's export (that job's kernel
// of the workload alone).
int RunExportBest(Client& client, const Invocation& inv, Io& io);

}  // namespace kiln::cli
