#include "server/tuning_record.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "codegen/kernel_template.h"
#include "hardware/reference/step_tolerance.h"

namespace kiln::server {

bool ReusableStatus(v1::MeasurementStatus s) {
  return s == v1::OK || s == v1::COMPILE_ERROR || s == v1::WRONG_RESULT;
}

std::string KernelDigest(const JobEntry& job, int task, const codegen::Config& config) {
  auto kernel = codegen::RenderFor(job.job.tasks(task).workload(), job.job.chip(), config);
  return kernel.ok() ? kernel->Hash() : "";
}

v1::TuningRecord RecordOf(const JobEntry& job, const v1::Trial& trial, const v1::Measurement& m,
                          int64_t now_ms) {
  const v1::TaskResult& task = job.job.tasks(trial.task_index());
  v1::TuningRecord r;
  r.set_workload_key(task.workload_key());
  *r.mutable_workload() = task.workload();
  r.set_chip_type(job.job.chip_type());
  *r.mutable_chip() = job.job.chip();
  *r.mutable_config() = trial.config();
  const codegen::Config config = codegen::FromProto(trial.config());
  r.set_config_key(codegen::ConfigKey(config));
  r.set_kernel_digest(KernelDigest(job, trial.task_index(), config));
  r.set_source_hash(trial.source_hash());
  r.set_toolchain(trial.toolchain());
  *r.mutable_measurement() = m;
  r.set_created_unix_ms(now_ms);
  r.set_job_id(job.job.id());
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void RefuseInexactStep(v1::DType dtype, v1::Measurement* m) {
  if (m->status() != v1::OK || !m->has_step()) return;
  const double tolerance = hardware::StepTolerance(dtype);
  const double err = m->step().max_error();
  if (err >= 0 && err <= tolerance) return;  // NaN fails too
  m->set_status(v1::WRONG_RESULT);
  m->set_message(absl::StrCat(
      "Kiln's step logits differ from LibTorch's: max_error ", absl::StrFormat("%.3g", err),
      " > tolerance ", absl::StrFormat("%.3g", tolerance), " (",
      dtype == v1::DTYPE_UNSPECIFIED ? "fp32" : absl::AsciiStrToLower(v1::DType_Name(dtype)),
      ", relative to the largest logit)"));
}

std::string ImplausibleFigures(const v1::Measurement& m, v1::TrialKind kind) {
  if (m.status() != v1::OK) return "";
  auto positive = [](double x) { return std::isfinite(x) && x > 0; };
  auto non_negative = [](double x) { return std::isfinite(x) && x >= 0; };
  auto figure = [](const char* name, double x) { return absl::StrFormat("%s %.3g", name, x); };
  if (!positive(m.median_us())) return figure("median_us", m.median_us()) + " is not a time";
  if (m.samples_us_size() == 0) return "an OK result without samples";
  for (double x : m.samples_us())
    if (!positive(x)) return figure("a sample of", x) + " us is not a time";
  const std::pair<const char*, double> others[] = {{"gflops", m.gflops()},
                                                   {"gbytes_per_s", m.gbytes_per_s()},
                                                   {"max_error", m.max_error()},
                                                   {"p10_us", m.p10_us()},
                                                   {"p90_us", m.p90_us()},
                                                   {"cv", m.cv()},
                                                   {"compile_seconds", m.compile_seconds()},
                                                   {"measure_seconds", m.measure_seconds()},
                                                   {"prepack_us", m.prepack_us()},
                                                   {"trial_seconds", m.trial_seconds()}};
  for (const auto& [name, x] : others)
    if (!non_negative(x)) return figure(name, x) + " is not finite and >= 0";
  for (const auto& route : m.baseline_routes()) {
    if (route.status() != v1::OK) continue;
    if (!positive(route.median_us()))
      return figure("a baseline route's median_us", route.median_us());
    for (double x : route.samples_us())
      if (!positive(x)) return figure("a baseline route's sample of", x) + " us";
  }
  if (kind == v1::STEP) {
    // A step's median is its scaled step time and its samples the raw ones (a few layers), so
    // they are not compared; its own figures must be figures. (Its max_error is judged by
    // RefuseInexactStep: a NaN there is a wrong step, not a forged one.)
    if (!m.has_step() || !positive(m.step().measured()))
      return figure("the step's measured tokens/s", m.step().measured()) + " is not positive";
    const v1::StepResult& st = m.step();
    const std::pair<const char*, double> step[] = {
        {"step.baseline_measured", st.baseline_measured()},
        {"step.step_us", st.step_us()},
        {"step.baseline_step_us", st.baseline_step_us()},
        {"step.read_gbytes_per_s", st.read_gbytes_per_s()},
        {"step.bytes_per_token", st.bytes_per_token()},
        {"step.bound", st.bound()},
        {"step.bound_fraction", st.bound_fraction()},
        {"step.baseline_bound_fraction", st.baseline_bound_fraction()}};
    for (const auto& [name, x] : step)
      if (!non_negative(x)) return figure(name, x) + " is not finite and >= 0";
    for (const auto* samples :
         {&st.samples_us(), &st.baseline_samples_us(), &st.read_gbytes_per_s_samples(),
          &st.baseline_read_gbytes_per_s_samples()})
      for (double x : *samples)
        if (!positive(x)) return figure("a step sample of", x) + " is not positive";
    for (const v1::StepOpTime& t : st.op_times())  // they weigh the job's tasks (a probe's)
      if (!non_negative(t.in_step_us()) || !non_negative(t.isolated_us()) || t.calls_per_step() < 0)
        return figure("step.op_times in_step_us", t.in_step_us()) + " (isolated_us " +
               absl::StrFormat("%.3g", t.isolated_us()) + ") is not a time";
    return "";
  }
  std::vector<double> sorted(m.samples_us().begin(), m.samples_us().end());
  std::sort(sorted.begin(), sorted.end());
  const double median = Median(sorted);
  // 1%: rounding and quantile conventions, never a different figure.
  if (m.median_us() < sorted.front() || m.median_us() > sorted.back() ||
      std::abs(m.median_us() - median) > 0.01 * median)
    return absl::StrFormat(
        "median_us %.3g is not the median of its %d samples (%.3g, in [%.3g, %.3g])", m.median_us(),
        m.samples_us_size(), median, sorted.front(), sorted.back());
  return "";
}

}  // namespace kiln::server
