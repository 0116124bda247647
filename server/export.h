// ExportKernels: a job's best kernels as self-contained sources, rendered from their templates
// with the winning configuration and the traits of the chip they were tuned on, so that they
// can be built into a runtime without Kiln (DESIGN.md §8).
#pragma once

#include "absl/status/statusor.h"
#include "kiln/v1/tuning_service.pb.h"

namespace kiln::server {

// One kernel per task with a verified best. FAILED_PRECONDITION when the job has none yet (or
// ran on a device whose kernels are not code: replay, sim), naming why.
absl::StatusOr<v1::ExportKernelsResponse> ExportJobKernels(const v1::Job& job);

}  // namespace kiln::server
