// `kiln report`: a job's results as one self-contained HTML page (inline CSS and SVG plots, no
// script, nothing fetched), made from the GetResults answer by pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "kiln/v1/tuning_service.pb.h"

namespace kiln::cli {

// `text` safe inside HTML/SVG text and quoted attributes: & < > " ' as entities, C0 control
// characters other than tab and newline dropped.
std::string HtmlEscape(std::string_view text);

// The report: summary table; convergence (best so far against trial, per task, the baseline as
// a line); roofline of every measured configuration (GFLOP/s against FLOP per byte, log-log, with
// the chip's measured peak and read bandwidth as roofs); for model jobs the per-operator share of
// the step and tokens/s against the memory bound; refused trials by status; provenance (chip,
// toolchains, source hashes of the best kernels, job spec). `chip` stands in for job.chip when
// the job carries none (null: none known).
std::string ReportHtml(const v1::GetResultsResponse& results,
                       const v1::ChipFingerprint* chip = nullptr);

// Writes `html` to `path` through a temporary file renamed into place; errors name the path.
absl::Status WriteReportFile(const std::string& html, const std::string& path);

// The default --out of `kiln report JOB`.
std::string DefaultReportPath(const std::string& job_id);

}  // namespace kiln::cli
