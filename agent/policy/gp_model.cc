#include "agent/policy/gp_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kiln::agent {
namespace {

constexpr double kThetaGrid[] = {0.0, 0.05, 0.2, 0.5, 1.0, 2.0, 4.0};
constexpr double kNoiseGrid[] = {1e-4, 1e-3, 1e-2, 0.05, 0.2};
constexpr int kTuneRows = 64;  // hyper-parameters are fitted on at most this many rows
constexpr int kSweeps = 2;

constexpr double kMixGrid[][3] = {{1, 0, 0},     {0, 1, 0},     {0, 0, 1},      {0.5, 0.5, 0},
                                  {0.5, 0, 0.5}, {0, 0.5, 0.5}, {0.3, 0.4, 0.3}};
constexpr double kScaleGrid[] = {0.5, 1.0, 2.0};

}  // namespace

GpModel::GpModel(std::vector<int> sizes, bool additive)
    : sizes_(std::move(sizes)), additive_(additive) {
  h_.theta.assign(sizes_.size(), 0.0);
  for (int k = 0; k < static_cast<int>(sizes_.size()); ++k)
    if (sizes_[k] > 1) {
      active_.push_back(k);
      h_.theta[k] = additive ? 1.0 : 0.5;
    }
  if (additive) h_.w1 = 0.3, h_.w2 = 0.4, h_.w3 = 0.3;
}

double GpModel::Distance(int k, int a, int b) const {
  if (a == b) return 0;
  return 0.5 + 0.5 * std::abs(a - b) / static_cast<double>(sizes_[k] - 1);
}

double GpModel::Cov(const Hyper& h, const double* d) const {
  const size_t m = active_.size();
  if (!additive_) {
    double s = 0;
    for (size_t q = 0; q < m; ++q) s += h.theta[active_[q]] * d[q];
    return h.scale * std::exp(-s);
  }
  double e1 = 0, p2 = 0, prod = 1;
  for (size_t q = 0; q < m; ++q) {
    const double sq = std::exp(-h.theta[active_[q]] * d[q]);
    e1 += sq;
    p2 += sq * sq;
    prod *= sq;
  }
  const double first = m ? e1 / m : 1.0;
  const double second = m > 1 ? (e1 * e1 - p2) / (m * (m - 1.0)) : first;
  return h.scale * (h.w1 * first + h.w2 * second + h.w3 * prod);
}

double GpModel::Factor(const std::vector<double>& d, int ld, const std::vector<double>& y,
                       const Hyper& h, std::vector<double>* l, std::vector<double>* alpha) const {
  const size_t m = active_.size();
  const int n = static_cast<int>(y.size());
  std::vector<double>& a = *l;
  a.assign(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j)
      a[i * n + j] = Cov(h, &d[(static_cast<size_t>(i) * ld + j) * m]) + (i == j ? h.noise : 0.0);
  // In-place Cholesky (lower triangle).
  double logdet = 0;
  for (int j = 0; j < n; ++j) {
    double diag = a[j * n + j];
    for (int p = 0; p < j; ++p) diag -= a[j * n + p] * a[j * n + p];
    if (!(diag > 1e-12)) return -std::numeric_limits<double>::infinity();
    const double ljj = std::sqrt(diag);
    a[j * n + j] = ljj;
    logdet += 2 * std::log(ljj);
    for (int i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (int p = 0; p < j; ++p) s -= a[i * n + p] * a[j * n + p];
      a[i * n + j] = s / ljj;
    }
  }
  // alpha = L^-T L^-1 y.
  std::vector<double>& x = *alpha;
  x = y;
  for (int i = 0; i < n; ++i) {
    for (int p = 0; p < i; ++p) x[i] -= a[i * n + p] * x[p];
    x[i] /= a[i * n + i];
  }
  double fit = 0;
  for (int i = 0; i < n; ++i) fit += x[i] * x[i];
  for (int i = n - 1; i >= 0; --i) {
    for (int p = i + 1; p < n; ++p) x[i] -= a[p * n + i] * x[p];
    x[i] /= a[i * n + i];
  }
  return -0.5 * fit - 0.5 * logdet - 0.5 * n * std::log(2 * M_PI);
}

void GpModel::Fit(const std::vector<Row>& rows, const std::vector<double>& y, bool tune,
                  int max_rows) {
  const int total = static_cast<int>(rows.size());
  std::vector<int> pick(total);
  std::iota(pick.begin(), pick.end(), 0);
  if (total > max_rows) {  // the best half, then the most recent
    std::vector<int> by_y = pick;
    std::partial_sort(by_y.begin(), by_y.begin() + max_rows / 2, by_y.end(),
                      [&](int a, int b) { return y[a] < y[b]; });
    std::vector<uint8_t> taken(total, 0);
    pick.assign(by_y.begin(), by_y.begin() + max_rows / 2);
    for (int i : pick) taken[i] = 1;
    for (int i = total - 1; i >= 0 && static_cast<int>(pick.size()) < max_rows; --i)
      if (!taken[i]) pick.push_back(i);
  }
  // Per-knob distances of every picked pair, once: the hyper-parameter fit uses the leading block.
  const size_t m = active_.size();
  const int n = static_cast<int>(pick.size());
  std::vector<double> d(static_cast<size_t>(n) * n * m, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j)
      for (size_t q = 0; q < m; ++q)
        d[(static_cast<size_t>(i) * n + j) * m + q] =
            Distance(active_[q], rows[pick[i]][active_[q]], rows[pick[j]][active_[q]]);
  std::vector<double> t(n);
  for (int i = 0; i < n; ++i) t[i] = y[pick[i]];
  std::vector<double> l, alpha;
  if (tune && m > 0 && !pick.empty()) {
    // The hyper-parameters are fitted on the leading rows (the best ones when pick is trimmed).
    const std::vector<double> tt(t.begin(), t.begin() + std::min(n, kTuneRows));
    double best = Factor(d, n, tt, h_, &l, &alpha);
    // An exponential prior on the weights (MAP rather than maximum likelihood): with few rows
    // the likelihood alone prefers weights so large that nothing correlates.
    auto penalty = [&](const Hyper& h) {
      double p = 0;
      for (int k : active_) p += weight_prior_ * h.theta[k];
      return p;
    };
    best -= penalty(h_);
    auto consider = [&](const Hyper& h) {
      double ll = Factor(d, n, tt, h, &l, &alpha) - penalty(h);
      if (ll > best + 1e-9) {
        best = ll;
        h_ = h;
      }
    };
    for (int sweep = 0; sweep < kSweeps; ++sweep) {
      for (int k : active_)
        for (double v : kThetaGrid) {
          Hyper h = h_;
          h.theta[k] = v;
          consider(h);
        }
      if (additive_) {
        for (const auto& mix : kMixGrid) {
          Hyper h = h_;
          h.w1 = mix[0], h.w2 = mix[1], h.w3 = mix[2];
          consider(h);
        }
        for (double v : kScaleGrid) {
          Hyper h = h_;
          h.scale = v;
          consider(h);
        }
      }
      for (double v : kNoiseGrid) {
        Hyper h = h_;
        h.noise = v;
        consider(h);
      }
    }
  }
  train_.clear();
  for (int i : pick) train_.push_back(rows[i]);
  Hyper h = h_;
  loglik_ = -std::numeric_limits<double>::infinity();
  for (int attempt = 0; attempt < 6 && !std::isfinite(loglik_); ++attempt, h.noise *= 10)
    loglik_ = Factor(d, n, t, h, &l_, &alpha_);
  prior_var_ = h.scale;
  if (!std::isfinite(loglik_)) train_.clear();  // predict the prior rather than garbage
}

void GpModel::Predict(const std::vector<Row>& rows, std::vector<float>* mean,
                      std::vector<float>* sd) const {
  const int n = static_cast<int>(train_.size());
  mean->assign(rows.size(), 0.0f);
  sd->assign(rows.size(), 1.0f);
  if (n == 0) return;
  const size_t m = active_.size();
  std::vector<double> ks(n), dist(m);
  for (size_t r = 0; r < rows.size(); ++r) {
    double mu = 0;
    for (int i = 0; i < n; ++i) {
      for (size_t q = 0; q < m; ++q)
        dist[q] = Distance(active_[q], rows[r][active_[q]], train_[i][active_[q]]);
      ks[i] = Cov(h_, dist.data());
      mu += ks[i] * alpha_[i];
    }
    // v = L^-1 k*, var = k(x, x) - v.v
    double vv = 0;
    for (int i = 0; i < n; ++i) {
      double s = ks[i];
      for (int p = 0; p < i; ++p) s -= l_[i * n + p] * ks[p];
      ks[i] = s / l_[i * n + i];
      vv += ks[i] * ks[i];
    }
    (*mean)[r] = static_cast<float>(mu);
    (*sd)[r] = static_cast<float>(std::sqrt(std::max(1e-9, prior_var_ - vv)));
  }
}

}  // namespace kiln::agent
