// How many trials a worker leases at once, and when it reports what it measured: trials that
// take a moment go in batches (one lease and one report for dozens of them, so the fleet's round
// trips do not cost more than its measurements), slow ones are leased a few at a time and
// reported as each finishes (the strategy learns from every result at once). Shared by
// kiln-worker and the simulated workers of kiln-bench-load, so that the load benchmark drives
// the coordinator the way a fleet does.
#pragma once

#include <algorithm>

namespace kiln {

class LeasePacing {
 public:
  static constexpr int kMaxLease = 64;               // LeaseTrials' max_trials cap
  static constexpr double kFastTrialSeconds = 0.05;  // below this, trials are batched
  static constexpr double kMaxHoldSeconds = 0.1;     // a result waits at most this long
  // LeaseTrials' long-poll: an idle worker waits this long for work before it asks again.
  static constexpr int kLeaseWaitMs = 5000;

  // `min_lease`: the lease size for slow trials (kiln-worker's --compile-ahead); `max_lease`:
  // the most it grows to (--max-lease).
  explicit LeasePacing(int min_lease, int max_lease = kMaxLease)
      : min_(std::clamp(min_lease, 1, kMaxLease)),
        max_(std::clamp(max_lease, min_, kMaxLease)),
        size_(min_) {}

  int lease_size() const { return size_; }

  // A leased batch of `trials` ran in `seconds`: fast trials double the next lease, slow ones
  // halve it back towards the minimum.
  void BatchRan(int trials, double seconds) {
    if (trials <= 0) return;
    const double each = seconds / trials;
    if (each < kFastTrialSeconds && trials >= size_)
      size_ = std::min(max_, size_ * 2);
    else if (each >= kFastTrialSeconds)
      size_ = std::max(min_, size_ / 2);
  }

  // Whether the results held (the oldest for `held_seconds`) go now, the trial just finished
  // having taken `last_trial_seconds`. The rest go when the leased batch is done.
  static bool ReportNow(double held_seconds, double last_trial_seconds) {
    return last_trial_seconds >= kFastTrialSeconds || held_seconds >= kMaxHoldSeconds;
  }

 private:
  int min_;
  int max_;
  int size_;
};

}  // namespace kiln
