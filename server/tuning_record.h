// Tuning records (kiln.v1.TuningRecord): how the coordinator builds one from a trial's measurement,
// and the checks a worker's measurement passes before it can become one.
//
// A tuning record is the central persisted value (DESIGN.md §3, §10.4): one configuration of one
// workload measured on one chip type (workload key, chip fingerprint, config, measurement, the
// digest of the kernel it rendered to, job, time). The store keeps one per (workload, chip type,
// config): it answers "top-k for this workload on this chip" (LookupBest, export) and "was this
// exact config already measured here?" (a later job's proposal is then answered from the store,
// not measured again).
//
// When one is written (server/trial_scheduler.cc, server/final_rounds.cc): when a worker answers a
// TUNE trial, unless its figure is a new best, whose record waits for its re-measurement (then the
// confirmed first figure, or the re-measured one when the first was timed briefly, is demoted or
// the re-measurement failed); and once a task's final rounds are decided, one per finalist (its
// median round, or its first failed one). A trial answered from the store writes none.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/knob_space.h"
#include "kiln/v1/types.pb.h"
#include "server/job_state.h"

namespace kiln::server {

// Statuses whose record is final for (workload, chip, config): answered from the store.
bool ReusableStatus(v1::MeasurementStatus s);

// The digest of the kernel `config` renders to for task `task` on the job's chip (empty when the
// task has no template for the chip or the configuration does not render).
std::string KernelDigest(const JobEntry& job, int task, const codegen::Config& config);

// The tuning record of `trial`'s configuration measured as `m`, for the store.
v1::TuningRecord RecordOf(const JobEntry& job, const v1::Trial& trial, const v1::Measurement& m,
                          int64_t now_ms);

// Why an OK measurement's figures cannot be a timing a worker made ("" when they can be). A
// worker holds valid credentials, not trust: what it reports becomes a job's result and the
// store's answer to later jobs, so figures no harness produces (not finite, not positive, a
// median that is not its samples') are refused before anything counts them.
std::string ImplausibleFigures(const v1::Measurement& m, v1::TrialKind kind);

// The composed step's logits must match LibTorch's within the step tolerance of the job's dtype.
// Checked where STEP results are accepted, not on the worker, so that a worker that skips the
// check (or a buggy one) cannot publish a wrong step's tokens/s: a step outside it is refused
// (its status becomes WRONG_RESULT, with the reason).
void RefuseInexactStep(v1::DType dtype, v1::Measurement* m);

// The median of `v` (of an even count, the mean of the middle two; 0 when empty).
double Median(std::vector<double> v);

}  // namespace kiln::server
