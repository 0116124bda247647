#include "agent/policy/policy_strategy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "agent/policy/checkpoint.h"
#include "agent/policy/cost_model.h"
#include "agent/policy/features.h"
#include "agent/policy/gp_model.h"
#include "agent/policy/policy_net.h"
#include "agent/policy/sampler.h"
#include "codegen/workload.h"
#include "common/status.h"

namespace kiln::agent {
namespace {

constexpr float kFailureReward = -2.0f;
// The local walk's temperature in log latency, as the annealing strategy's: hot at the start and
// after the walk is stuck, cooled per result of its own.
// The walk's adaptive share (PolicyOptions::local_adapt): an arm's result is a hit when it
// enters the fastest kTop so far; statistics decay by kArmDecay per credited result.
constexpr size_t kTop = 8;
constexpr double kArmDecay = 0.98, kShareMin = 0.1, kShareMax = 0.7;

class PolicyStrategy final : public Strategy {
 public:
  PolicyStrategy(StrategyContext c, PolicyOptions o)
      : ctx_(std::move(c)),
        o_(o),
        index_(IndexFor(ctx_)),
        ledger_(index_),
        features_(index_->space(), ctx_.workload, ctx_.chip),
        policy_(std::make_unique<PolicyNet>(features_, index_, ctx_.seed)),
        cost_(std::make_unique<CostModel>(ctx_.seed)),
        sampler_(features_, *index_),
        gp_(index_->sizes()),
        rng_(ctx_.seed) {}

  ~PolicyStrategy() override { Save(); }

  absl::Status Init() {
    if (!ctx_.init_checkpoint.empty() && o_.prior_mean != PriorMean::kNone) {
      // The checkpoint as the GP's prior mean, weighted by how well it fits this task: a prior
      // from unlike kernels then costs nothing, where loading it into the networks that propose
      // (PriorMean::kNone) steered the first trials to what was fast elsewhere. Leave-one-out over
      // the replay spaces: fewer trials than a cold start on four of five, a tie on the fifth
      // (docs/benchmarks.md).
      prior_ = std::make_unique<CostModel>(ctx_.seed);
      RETURN_IF_ERROR(LoadCheckpoint(ctx_.init_checkpoint, nullptr, prior_.get()));
      if (o_.prior_mean == PriorMean::kCostModelAndPolicy)
        RETURN_IF_ERROR(LoadCheckpoint(ctx_.init_checkpoint, policy_.get(), nullptr));
      prior_mean_ = true;
    } else if (!ctx_.init_checkpoint.empty()) {
      auto s = LoadCheckpoint(ctx_.init_checkpoint, policy_.get(), cost_.get());
      if (!s.ok()) return s;
      warm_ = true;
      if (o_.trust_after > 0) {  // a frozen copy of the prior, for the trust check
        prior_ = std::make_unique<CostModel>(ctx_.seed);
        RETURN_IF_ERROR(LoadCheckpoint(ctx_.init_checkpoint, nullptr, prior_.get()));
      }
    }
    if (ctx_.persist && ctx_.save_checkpoint.empty() && !ModelDirectory().empty())
      ctx_.save_checkpoint =
          absl::StrCat(ModelDirectory(), "/tasks/",
                       ctx_.chip.chip_type().empty() ? "chip" : ctx_.chip.chip_type(), "/",
                       absl::Hex(Fnv(codegen::WorkloadKey(ctx_.workload))), "-", ctx_.seed, ".pt");
    if (!ctx_.persist) ctx_.save_checkpoint.clear();
    sampler_.SetLogits(policy_->Logits(), policy_->LogNormalizer());
    return absl::OkStatus();
  }

  std::string name() const override { return "policy"; }

  std::vector<codegen::Config> Propose(int n) override {
    std::vector<codegen::Config> out;
    for (int i = 0; i < n; ++i) {
      Row r;
      if (!Next(&r)) break;
      ledger_.MarkSeen(r);
      chosen_.push_back(r);
      old_logp_[index_->Code(r)] = sampler_.LogProb(r);
      out.push_back(index_->ToConfig(r));
    }
    return out;
  }

  void Observe(const std::vector<Observation>& results) override {
    for (const auto& o : results) {
      Ledger::Result res;
      size_t before = ledger_.results().size();
      if (!ledger_.Record(o.config, o.status == v1::OK, o.median_us, &res)) continue;
      if (ledger_.results().size() == before) continue;  // measured before
      const uint64_t code = index_->Code(res.row);
      x_.resize(x_.size() + kConfigFeatures);
      features_.ConfigRow(res.row, x_.data() + x_.size() - kConfigFeatures);
      auto lp = old_logp_.find(code);
      samples_.push_back(
          {res.row, lp != old_logp_.end() ? lp->second : sampler_.LogProb(res.row), 0});
      auto pred = predicted_.find(code);
      if (pred != predicted_.end()) {
        recent_.push_back({pred->second, res.ok ? static_cast<float>(res.log_us) : 1e30f});
        if (recent_.size() > 64) recent_.pop_front();
      }
      uint8_t any = 0;
      for (int m = 0; m < cost_->members(); ++m)
        any |= mask_.emplace_back(std::uniform_real_distribution<>(0, 1)(rng_) < 0.7);
      if (!any) mask_[mask_.size() - 1 - rng_() % cost_->members()] = 1;
      // One notion of progress for both local moves: a result 1% faster than the best so far.
      const bool improved = res.ok && res.log_us < progress_best_ - 0.01;
      if (improved) progress_best_ = res.log_us;
      stall_ = improved ? 0 : stall_ + 1;
      if (o_.crowd > 0)  // the crowding penalty's bookkeeping, only when it is on
        for (int k = 0; k < index_->num_knobs(); ++k) ++crowd_[CrowdKey(res.row, k)];
      if (o_.flip_max > 0 && improved) {
        flips_.clear();
        flips_ranked_ = false;
        for (const Row& n : index_->Neighbours(res.row)) {
          int k = 0;
          while (n[k] == res.row[k]) ++k;
          if (index_->sizes()[k] <= o_.flip_max && !ledger_.Seen(n)) flips_.push_back(n);
        }
      }
      auto arm = arm_.find(code);
      if (arm != arm_.end()) {
        Credit(arm->second, res);
        if (arm->second && walk_.placed()) {
          walk_.Step(res, rng_);
          walk_.Cool();
        }
      }
      if (res.ok) {
        top_.insert(std::upper_bound(top_.begin(), top_.end(), res.log_us), res.log_us);
        if (top_.size() > kTop) top_.pop_back();
      }
      ++since_;
      ok_results_ += res.ok;
    }
    if (prior_ && !prior_mean_ && ok_results_ >= o_.trust_after) CheckTrust();
    if (since_ >= UpdateEvery()) Learn();
    if (ctx_.persist && !ctx_.save_checkpoint.empty() &&
        ledger_.results().size() >= saved_at_ + o_.save_every)
      Save();
  }

  void Exclude(const codegen::Config& config) override {
    Row r;
    if (index_->FromConfig(config, &r)) ledger_.MarkSeen(r);
  }

 private:
  // Learning is frequent while data is scarce and each result matters most.
  int UpdateEvery() const {
    size_t n = ledger_.results().size();
    return n < 64 ? 2 : 4;
  }

  bool Next(Row* r) {
    const int initial = std::max(warm_ ? o_.initial_warm : o_.initial, fill_until_);
    if (static_cast<int>(ledger_.num_seen()) < initial)
      return Unbiased(SpaceFilling(ledger_, chosen_, 64, rng_, r) || ledger_.RandomUnseen(rng_, r),
                      *r);
    if (!learned_) Learn();
    if (!flips_ranked_) RankFlips();
    while (!flips_.empty()) {
      *r = std::move(flips_.front());
      flips_.pop_front();
      if (!ledger_.Seen(*r)) return true;
    }
    if (o_.local > 0 && std::uniform_real_distribution<>(0, 1)(rng_) < WalkShare() && Walk(r)) {
      arm_[index_->Code(*r)] = 1;
      return true;
    }
    if (std::uniform_real_distribution<>(0, 1)(rng_) < o_.explore) {
      std::vector<Row> d = sampler_.Draw(1, ledger_, rng_);
      if (!d.empty()) {
        *r = d[0];
        arm_[index_->Code(*r)] = 0;
        return true;
      }
    }
    for (int pass = 0; pass < 2; ++pass) {
      while (!queue_.empty()) {
        *r = std::move(queue_.front());
        queue_.pop_front();
        if (!ledger_.Seen(*r)) return (arm_[index_->Code(*r)] = 0, true);
      }
      Refresh();
    }
    return Unbiased(ledger_.RandomUnseen(rng_, r), *r);
  }

  // The local walk's next row (PolicyOptions::local); false when it is stuck (it then starts
  // again, hot, from the best).
  bool Walk(Row* out) {
    if (!walk_.placed() || ledger_.best_log_us() < walk_.energy() - 0.01) {
      if (ledger_.best_result() < 0) return false;
      walk_.MoveTo(ledger_.results()[ledger_.best_result()]);
    }
    return walk_.NextMove(ledger_, rng_, out);
  }
  // The walk's share of proposals: PolicyOptions::local, tilted by how often each arm's results
  // enter the fastest kTop so far (discounted, shrunk toward the pooled rate by local_adapt
  // pseudo-results per arm).
  double WalkShare() const {
    if (o_.local_adapt <= 0) return o_.local;
    const double pooled = (hits_[0] + hits_[1] + 1e-9) / (tries_[0] + tries_[1] + 1e-9);
    double rate[2];
    for (int a = 0; a < 2; ++a)
      rate[a] = (hits_[a] + o_.local_adapt * pooled) / (tries_[a] + o_.local_adapt);
    const double w = o_.local * rate[1], s = (1 - o_.local) * rate[0];
    return std::clamp(w / (w + s), kShareMin, kShareMax);
  }
  void Credit(int arm, const Ledger::Result& res) {
    const bool hit = res.ok && (top_.size() < kTop || res.log_us < top_.back());
    for (int a = 0; a < 2; ++a) hits_[a] *= kArmDecay, tries_[a] *= kArmDecay;
    hits_[arm] += hit, tries_[arm] += 1;
  }
  // Notes a row picked without the models (space filling or uniform): such rows decide whether
  // the prior's weight is trusted (PolicyOptions::prior_fit), free of the screen's selection.
  bool Unbiased(bool picked, const Row& r) {
    if (picked) unbiased_.insert(index_->Code(r));
    return picked;
  }

  // A configuration with one knob left out: measured rows sharing it crowd that line.
  static uint64_t CrowdKey(const Row& r, int skip) {
    uint64_t h = 0x9e3779b97f4a7c15ULL * (skip + 1);
    for (int k = 0; k < static_cast<int>(r.size()); ++k)
      h = (h ^ (static_cast<uint64_t>(k == skip ? -1 : r[k]) + 0x632be5ab)) * 0x100000001b3ULL;
    return h;
  }
  // How many measured rows differ from `r` in exactly one knob (r itself unmeasured).
  int Crowd(const Row& r) const {
    int n = 0;
    for (int k = 0; k < index_->num_knobs(); ++k) {
      auto it = crowd_.find(CrowdKey(r, k));
      if (it != crowd_.end()) n += it->second;
    }
    return n;
  }

  void Learn();
  void Refresh();
  void RankFlips();
  void Acquisition(const std::vector<Row>& pool, std::vector<float>* acq, std::vector<float>* mean);
  void CheckTrust();
  void FitPriorWeight(const std::vector<Row>& rows, std::vector<double>* y);
  void SetPriorClip();
  void Save() {
    if (!ctx_.save_checkpoint.empty() && !ledger_.results().empty()) {
      // A failed save (a full disk) costs only the checkpoint: the search goes on.
      absl::Status saved = SaveCheckpoint(ctx_.save_checkpoint, policy_.get(), cost_.get());
      if (!saved.ok())
        std::fprintf(stderr, "kiln: policy checkpoint not saved: %s\n",
                     std::string(saved.message()).c_str());
      saved_at_ = ledger_.results().size();
    }
  }
  void Report(const char* name, double v) {
    if (ctx_.metrics && std::isfinite(v)) ctx_.metrics->Report(name, v);
  }

  StrategyContext ctx_;
  PolicyOptions o_;
  std::shared_ptr<const SpaceIndex> index_;
  Ledger ledger_;
  SpaceFeatures features_;
  std::unique_ptr<PolicyNet> policy_;
  std::unique_ptr<CostModel> cost_;
  // The checkpoint's cost model as loaded: the GP's prior mean (prior_mean_), or, with the
  // networks loaded (PriorMean::kNone), kept for the trust check until it has run.
  std::unique_ptr<CostModel> prior_;
  bool prior_mean_ = false;
  double prior_weight_ = 0, prior_offset_ = 0;
  float prior_clip_ = -std::numeric_limits<float>::infinity();
  bool prior_clip_set_ = false;
  std::unordered_map<uint64_t, float> prior_cache_;  // the prior's prediction per measured row
  Sampler sampler_;
  GpModel gp_;
  size_t gp_tuned_at_ = 0;  // results when the GP's kernel was last refitted
  std::mt19937_64 rng_;
  bool warm_ = false, learned_ = false;
  int since_ = 0, ok_results_ = 0, fill_until_ = 0;
  int stall_ = 0;                 // results since the best improved by 1%
  double progress_best_ = 1e300;  // the best log latency that counted as a 1% improvement
  size_t saved_at_ = 0;
  std::vector<Row> chosen_;
  std::unordered_set<uint64_t> unbiased_;  // codes of rows picked without the models
  std::vector<float> x_;                   // features of every result, in ledger order
  std::vector<uint8_t> mask_;              // results x members: which members train on which result
  std::vector<PpoSample> samples_;
  std::unordered_map<uint64_t, float> old_logp_, predicted_;
  std::deque<std::pair<float, float>> recent_;  // (predicted, measured) for rank accuracy
  std::deque<Row> queue_;                       // screened candidates, most promising first
  std::deque<Row> flips_;                       // the new best's categorical neighbours
  bool flips_ranked_ = true;
  MetropolisWalk walk_;                    // the local walk
  std::unordered_map<uint64_t, int> arm_;  // codes of the screen's (0) and the walk's (1) rows
  std::vector<double> top_;                // the fastest kTop log latencies so far, ascending
  double hits_[2] = {0, 0}, tries_[2] = {0, 0};  // per arm, discounted
  std::unordered_map<uint64_t, int> crowd_;      // CrowdKey -> measured rows on that line
};

void PolicyStrategy::Learn() {
  learned_ = true;
  since_ = 0;
  const auto& results = ledger_.results();
  std::vector<double> ok_logs;
  for (const auto& r : results)
    if (r.ok) ok_logs.push_back(r.log_us);
  if (ok_logs.size() >= 2) {
    double mean = 0, var = 0;
    for (double v : ok_logs) mean += v / ok_logs.size();
    for (double v : ok_logs) var += (v - mean) * (v - mean) / ok_logs.size();
    const double sd = std::max(1e-3, std::sqrt(var));
    std::nth_element(ok_logs.begin(), ok_logs.begin() + ok_logs.size() / 2, ok_logs.end());
    const double median = ok_logs[ok_logs.size() / 2];
    std::vector<float> y(results.size());
    std::vector<uint8_t> ok(results.size());
    for (size_t i = 0; i < results.size(); ++i) {
      ok[i] = results[i].ok;
      y[i] = ok[i] ? static_cast<float>((results[i].log_us - mean) / sd) : 0;
      samples_[i].reward =
          ok[i] ? std::clamp(static_cast<float>((median - results[i].log_us) / sd), -3.0f, 3.0f)
                : kFailureReward;
    }
    cost_->Train(x_, y, ok, mask_, results.size() < 64 ? o_.cost_steps_early : o_.cost_steps, rng_);
    if (o_.surrogate != Surrogate::kEnsemble) {
      std::vector<Row> rows;
      std::vector<double> gy;
      for (size_t i = 0; i < results.size(); ++i)
        if (ok[i]) rows.push_back(results[i].row), gy.push_back(y[i]);
      const bool tune = gp_tuned_at_ == 0 || results.size() >= gp_tuned_at_ + o_.gp_tune_every;
      if (tune) gp_tuned_at_ = results.size();
      if (prior_mean_) FitPriorWeight(rows, &gy);
      gp_.set_weight_prior(o_.gp_prior);
      gp_.Fit(rows, gy, tune, o_.gp_rows);
    }
    size_t from =
        samples_.size() > static_cast<size_t>(o_.ppo_window) ? samples_.size() - o_.ppo_window : 0;
    PpoStats st = policy_->Update({samples_.begin() + from, samples_.end()}, o_.ppo_epochs);
    Report(kPolicyLoss, st.loss);
    Report(kPolicyEntropy, st.entropy);
    Report(kPolicyReward, st.mean_reward);
    if (recent_.size() >= 8) {
      int agree = 0, pairs = 0;
      for (size_t i = 0; i < recent_.size(); ++i)
        for (size_t j = i + 1; j < recent_.size(); ++j) {
          if (recent_[i].second == recent_[j].second) continue;
          ++pairs;
          agree += (recent_[i].first < recent_[j].first) == (recent_[i].second < recent_[j].second);
        }
      if (pairs > 0) Report(kCostModelRankAccuracy, static_cast<double>(agree) / pairs);
    }
    sampler_.SetLogits(policy_->Logits(), policy_->LogNormalizer());
  }
  Refresh();
}

// Transfer is only as good as the checkpoint's prior for this space. Its cost model, as loaded,
// ranks the first successful results; if it orders fewer than trust_min of their pairs correctly
// (the checkpoint came from kernels unlike this one), both models restart cold and learn from
// the measurements so far, so a bad prior costs trust_after trials instead of hundreds.
void PolicyStrategy::CheckTrust() {
  const auto& results = ledger_.results();
  std::vector<float> x;
  std::vector<double> measured;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok) continue;
    x.insert(x.end(), x_.begin() + i * kConfigFeatures, x_.begin() + (i + 1) * kConfigFeatures);
    measured.push_back(results[i].log_us);
  }
  std::vector<float> predicted;
  prior_->Predict(x.data(), static_cast<int>(measured.size()), &predicted, nullptr);
  prior_.reset();
  int agree = 0, pairs = 0;
  for (size_t i = 0; i < measured.size(); ++i)
    for (size_t j = i + 1; j < measured.size(); ++j) {
      if (measured[i] == measured[j]) continue;
      ++pairs;
      agree += (predicted[i] < predicted[j]) == (measured[i] < measured[j]);
    }
  if (pairs > 0) Report(kPriorRankAccuracy, static_cast<double>(agree) / pairs);
  if (pairs == 0 || agree >= o_.trust_min * pairs) return;
  policy_ = std::make_unique<PolicyNet>(features_, index_, ctx_.seed + 1);
  cost_ = std::make_unique<CostModel>(ctx_.seed + 1);
  warm_ = false;
  std::vector<Row> rows;
  for (const auto& s : samples_) rows.push_back(s.row);
  std::vector<float> logp = policy_->LogProb(rows);
  for (size_t i = 0; i < samples_.size(); ++i) samples_[i].old_logp = logp[i];
  old_logp_.clear();
  predicted_.clear();
  recent_.clear();
  queue_.clear();
  sampler_.SetLogits(policy_->Logits(), policy_->LogNormalizer());
  since_ = UpdateEvery();  // learn from everything measured so far before the next proposal
  // and explore as a cold start would: the prior's picks crowd one region of the space.
  fill_until_ = static_cast<int>(ledger_.num_seen()) + o_.trust_refill;
}

// The prior's predictions are floored at their prior_clip quantile over a uniform sample of the
// space: checkpoints from other spaces rank a new space's bulk (the 2080 Ti's: 84% of pairs) but
// not its fastest tenth (54%, chance), so below that level the prior is made flat and the
// task's own results (the GP on the residuals) order the top.
void PolicyStrategy::SetPriorClip() {
  if (prior_clip_set_ || o_.prior_clip <= 0) return;
  prior_clip_set_ = true;
  std::mt19937_64 rng(ctx_.seed ^ 0x9e3779b97f4a7c15ull);  // apart from the search's stream
  std::vector<float> u;
  Row r;
  for (int i = 0; i < 4096; ++i) {
    if (!index_->SampleUniform(rng, &r)) break;
    u.resize(u.size() + kConfigFeatures);
    features_.ConfigRow(r, u.data() + u.size() - kConfigFeatures);
  }
  std::vector<float> p;
  const int m = static_cast<int>(u.size() / kConfigFeatures);
  if (m > 0) {
    prior_->Predict(u.data(), m, &p, nullptr);
    const size_t k = std::min(p.size() - 1, static_cast<size_t>(o_.prior_clip * p.size()));
    std::nth_element(p.begin(), p.begin() + k, p.end());
    prior_clip_ = p[k];
  }
}

// The GP's prior mean is w * (prior(x) - offset): w by ridge regression of the standardised
// results on the checkpoint's predictions (shrunk toward 0, never negative), so a prior that
// does not rank this space gets no weight and the search is the cold one. `y` becomes the
// residuals the GP models.
void PolicyStrategy::FitPriorWeight(const std::vector<Row>& rows, std::vector<double>* y) {
  const int n = static_cast<int>(rows.size());
  SetPriorClip();
  std::vector<Row> fresh;  // rows the prior has not predicted yet (it is frozen: once each)
  for (const Row& r : rows)
    if (!prior_cache_.count(index_->Code(r))) fresh.push_back(r);
  if (!fresh.empty()) {
    std::vector<float> x(fresh.size() * kConfigFeatures), q;
    for (size_t i = 0; i < fresh.size(); ++i)
      features_.ConfigRow(fresh[i], x.data() + i * kConfigFeatures);
    prior_->Predict(x.data(), static_cast<int>(fresh.size()), &q, nullptr);
    for (size_t i = 0; i < fresh.size(); ++i) prior_cache_[index_->Code(fresh[i])] = q[i];
  }
  std::vector<float> p(n);
  for (int i = 0; i < n; ++i) p[i] = std::max(prior_clip_, prior_cache_.at(index_->Code(rows[i])));
  // Least squares of y on p over the rows in `use`, shrunk toward 0 (never negative); also the
  // rows' mean prediction and the correlation of y with p.
  struct Fit {
    double weight = 0, mean_p = 0, corr = 0;
    int rows = 0;
  };
  auto fit = [&](auto use) {
    Fit f;
    double my = 0;
    for (int i = 0; i < n; ++i)
      if (use(i)) f.mean_p += p[i], my += (*y)[i], ++f.rows;
    if (f.rows == 0) return f;
    f.mean_p /= f.rows, my /= f.rows;
    double sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; ++i) {
      if (!use(i)) continue;
      const double dp = p[i] - f.mean_p, dy = (*y)[i] - my;
      sxy += dp * dy, sxx += dp * dp, syy += dy * dy;
    }
    f.weight = std::max(0.0, sxy / (sxx + o_.prior_ridge * std::max(sxx / f.rows, 1e-6)));
    f.corr = sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 0;
    return f;
  };
  const Fit all = fit([](int) { return true; });
  prior_weight_ = all.weight;
  if (o_.prior_fit) {  // the unbiased rows decide whether the prior ranks this task
    const Fit free = fit([&](int i) { return unbiased_.count(index_->Code(rows[i])) > 0; });
    if (free.rows < std::max(2, o_.prior_fit_min) || free.corr <= o_.prior_fit_corr)
      prior_weight_ = 0;
  }
  const double mp = all.mean_p;
  prior_offset_ = mp;
  for (int i = 0; i < n; ++i) (*y)[i] -= prior_weight_ * (p[i] - mp);
  Report(kPriorWeight, prior_weight_);
}

// The screen's score for each row (lower is more promising): a lower confidence bound on the
// predicted log latency plus the failure and crowding penalties. `mean` (optional) gets the
// predicted mean.
void PolicyStrategy::Acquisition(const std::vector<Row>& pool, std::vector<float>* acq,
                                 std::vector<float>* mean_out) {
  std::vector<float> x(pool.size() * kConfigFeatures);
  for (size_t i = 0; i < pool.size(); ++i)
    features_.ConfigRow(pool[i], x.data() + i * kConfigFeatures);
  if (prior_mean_) SetPriorClip();
  const double crowd = stall_ >= o_.crowd_after ? o_.crowd : 0.0;
  std::vector<float> mean, spread, fail;
  cost_->Predict(x.data(), static_cast<int>(pool.size()), &mean, &spread, &fail);
  float kappa = static_cast<float>(o_.kappa);
  if (o_.surrogate != Surrogate::kEnsemble && gp_tuned_at_ > 0) {
    std::vector<float> gmean, gsd;
    gp_.Predict(pool, &gmean, &gsd);
    if (prior_mean_ && prior_weight_ != 0) {
      std::vector<float> p;
      prior_->Predict(x.data(), static_cast<int>(pool.size()), &p, nullptr);
      for (size_t i = 0; i < pool.size(); ++i)
        gmean[i] +=
            static_cast<float>(prior_weight_ * (std::max(prior_clip_, p[i]) - prior_offset_));
    }
    const float w = o_.surrogate == Surrogate::kGp ? 1.0f : 0.5f;
    for (size_t i = 0; i < pool.size(); ++i) {
      mean[i] = w * gmean[i] + (1 - w) * mean[i];
      spread[i] = w * gsd[i] * static_cast<float>(o_.gp_kappa) + (1 - w) * spread[i] * kappa;
    }
    kappa = 1.0f;
  }
  acq->resize(pool.size());
  for (size_t i = 0; i < pool.size(); ++i)
    (*acq)[i] = mean[i] - kappa * spread[i] + static_cast<float>(o_.fail_penalty) * fail[i] +
                (crowd > 0 ? static_cast<float>(crowd * std::log1p(Crowd(pool[i]))) : 0.0f);
  if (mean_out) *mean_out = std::move(mean);
}

void PolicyStrategy::RankFlips() {
  flips_ranked_ = true;
  if (o_.flip_cap <= 0 || static_cast<int>(flips_.size()) <= o_.flip_cap) return;
  std::vector<Row> rows(flips_.begin(), flips_.end());
  std::vector<float> acq;
  Acquisition(rows, &acq, nullptr);
  std::vector<int> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::partial_sort(order.begin(), order.begin() + o_.flip_cap, order.end(),
                    [&](int a, int b) { return acq[a] < acq[b]; });
  flips_.clear();
  for (int i = 0; i < o_.flip_cap; ++i) flips_.push_back(rows[order[i]]);
}

void PolicyStrategy::Refresh() {
  // Spaces too large to enumerate pay a validity check per draw: screen smaller pools there.
  const int shrink = index_->enumerated() ? 1 : 4;
  std::vector<Row> pool = sampler_.Draw(o_.pool_policy / shrink, ledger_, rng_);
  std::unordered_set<uint64_t> in_pool;
  for (const Row& r : pool) in_pool.insert(index_->Code(r));
  auto add = [&](const Row& r) {
    if (!ledger_.Seen(r) && in_pool.insert(index_->Code(r)).second) pool.push_back(r);
  };
  std::vector<int> order;
  for (size_t i = 0; i < ledger_.results().size(); ++i)
    if (ledger_.results()[i].ok) order.push_back(static_cast<int>(i));
  const int top = std::min<int>(o_.neighbours_of, order.size());
  std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int a, int b) {
    return ledger_.results()[a].log_us < ledger_.results()[b].log_us;
  });
  for (int i = 0; i < top; ++i)
    for (const Row& n : index_->Neighbours(ledger_.results()[order[i]].row)) add(n);
  Row r;
  for (int i = 0; i < o_.pool_uniform / shrink && ledger_.RandomUnseen(rng_, &r); ++i) add(r);
  if (pool.empty()) return;
  std::vector<float> score, mean;
  Acquisition(pool, &score, &mean);
  std::vector<std::pair<float, int>> acq(pool.size());
  for (size_t i = 0; i < pool.size(); ++i) acq[i] = {score[i], static_cast<int>(i)};
  const size_t keep = std::min<size_t>(acq.size(), 32);
  std::partial_sort(acq.begin(), acq.begin() + keep, acq.end());
  queue_.clear();
  for (size_t i = 0; i < keep; ++i) {
    predicted_[index_->Code(pool[acq[i].second])] = mean[acq[i].second];
    queue_.push_back(std::move(pool[acq[i].second]));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Strategy>> NewPolicyStrategy(StrategyContext context,
                                                            PolicyOptions options) {
  auto s = std::make_unique<PolicyStrategy>(std::move(context), options);
  auto status = s->Init();
  if (!status.ok()) return status;
  return std::unique_ptr<Strategy>(std::move(s));
}

}  // namespace kiln::agent
