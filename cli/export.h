// `kiln export JOB [--out DIR] [--json]`: writes a job's best kernels as self-contained sources
// (one file per task) and a manifest.json (workload, configuration, timing, the chip, each
// kernel's calling convention); CPU kernels also as a library (export_library.h: kiln_kernels.h,
// CMakeLists.txt, a self-test, README.md).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "kiln/v1/tuning_service.pb.h"

namespace kiln::cli {

// The directory `kiln export` writes to when --out is not given.
std::string DefaultExportDir(const std::string& job_id);

// Writes every kernel, the library around the CPU kernels and manifest.json into `dir`, all
// or nothing: into a sibling temporary
// directory first, renamed to `dir` at the end. `dir` must not exist or be empty (nothing is
// overwritten). Returns the manifest's JSON text.
absl::StatusOr<std::string> WriteExport(const v1::ExportKernelsResponse& kernels,
                                        const std::string& dir);

// OK for a plain base name the coordinator may ask to be written inside --out: not empty, not
// manifest.json, no '/', '\\', "..", leading '.', NUL or other control characters.
absl::Status CheckExportFileName(const std::string& name);

// The lines `kiln export` prints: one per kernel, file, workload and best median.
std::string FormatExport(const v1::ExportKernelsResponse& kernels, const std::string& dir);

}  // namespace kiln::cli
