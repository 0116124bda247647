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

// The triangular loops below run along contiguous rows (axpy, no reductions), so the compiler
// vectorizes them, with the widest vectors this CPU has; the pool's rows are predicted in blocks
// of this many. Each clone contracts multiply-adds alike in its vector body and its tail, so a
// row's prediction does not depend on the block it falls in.
constexpr int kPredictBlock = 64;
#define KILN_GP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

// In place: x = L^-1 x for `cols` right-hand sides stored row after row (x[i * cols + c]), with
// L given as U = L^T (row-major, n x n).
KILN_GP_CLONES void ForwardSolve(const double* u, int n, double* x, int cols) {
  for (int p = 0; p < n; ++p) {
    double* xp = x + static_cast<size_t>(p) * cols;
    const double inv = 1.0 / u[static_cast<size_t>(p) * n + p];
    for (int c = 0; c < cols; ++c) xp[c] *= inv;
    for (int i = p + 1; i < n; ++i) {
      const double l = u[static_cast<size_t>(p) * n + i];
      double* xi = x + static_cast<size_t>(i) * cols;
      for (int c = 0; c < cols; ++c) xi[c] -= l * xp[c];
    }
  }
}

// In place: the upper triangle of `u` (row-major, n x n) holds a symmetric matrix's upper half
// and becomes U = L^T of its Cholesky factor; left-looking, one row of U (a column of L) at a
// time. Returns log det, or -inf when the matrix is not positive definite.
KILN_GP_CLONES double CholeskyUpper(double* u, int n) {
  double logdet = 0;
  for (int j = 0; j < n; ++j) {
    double* row = u + static_cast<size_t>(j) * n;
    for (int p = 0; p < j; ++p) {
      const double* up = u + static_cast<size_t>(p) * n;
      const double c = up[j];
      for (int i = j; i < n; ++i) row[i] -= c * up[i];
    }
    const double diag = row[j];
    if (!(diag > 1e-12)) return -std::numeric_limits<double>::infinity();
    const double ljj = std::sqrt(diag);
    logdet += 2 * std::log(ljj);
    const double inv = 1.0 / ljj;
    for (int i = j; i < n; ++i) row[i] *= inv;
  }
  return logdet;
}

}  // namespace

GpModel::GpModel(std::vector<int> sizes) : sizes_(std::move(sizes)) {
  h_.theta.assign(sizes_.size(), 0.0);
  for (int k = 0; k < static_cast<int>(sizes_.size()); ++k)
    if (sizes_[k] > 1) {
      active_.push_back(k);
      h_.theta[k] = 0.5;
    }
  // d_k = 0 for equal values, 0.5 + 0.5 |a - b| / (size - 1) otherwise.
  for (int k : active_) {
    const int s = sizes_[k];
    asize_.push_back(s);
    offset_.push_back(static_cast<int>(dist_.size()));
    for (int a = 0; a < s; ++a)
      for (int b = 0; b < s; ++b)
        dist_.push_back(a == b ? 0.0 : 0.5 + 0.5 * std::abs(a - b) / static_cast<double>(s - 1));
  }
}

void GpModel::Similarities(const Hyper& h, std::vector<double>* sim) const {
  sim->resize(dist_.size());
  for (size_t q = 0; q < active_.size(); ++q) {
    const size_t end = q + 1 < active_.size() ? offset_[q + 1] : dist_.size();
    const double theta = h.theta[active_[q]];
    for (size_t i = offset_[q]; i < end; ++i) (*sim)[i] = std::exp(-theta * dist_[i]);
  }
}

void GpModel::KernelRow(const Hyper& h, const std::vector<double>& sim, const int32_t* a,
                        const int32_t* bq, size_t stride, int cols, double* out) const {
  const size_t m = active_.size();
  // sim is symmetric in the value pair: the row of a's value, indexed by b's.
  auto table = [&](size_t q) { return sim.data() + offset_[q] + a[q] * asize_[q]; };
  std::fill(out, out + cols, h.scale);
  for (size_t q = 0; q < m; ++q) {
    const double* t = table(q);
    const int32_t* b = bq + q * stride;
    for (int c = 0; c < cols; ++c) out[c] *= t[b[c]];
  }
}

double GpModel::Factor(const std::vector<int32_t>& packed, size_t stride,
                       const std::vector<double>& y, const Hyper& h, std::vector<double>* u_out,
                       std::vector<double>* alpha) const {
  const size_t m = active_.size();
  const int n = static_cast<int>(y.size());
  std::vector<double> sim;
  Similarities(h, &sim);
  std::vector<double>& u = *u_out;
  u.assign(static_cast<size_t>(n) * n, 0.0);
  std::vector<int32_t> a(m);
  for (int j = 0; j < n; ++j) {
    for (size_t q = 0; q < m; ++q) a[q] = packed[q * stride + j];
    double* row = &u[static_cast<size_t>(j) * n];
    KernelRow(h, sim, a.data(), packed.data() + j, stride, n - j, row + j);
    row[j] += h.noise;
  }
  const double logdet = CholeskyUpper(u.data(), n);
  if (!std::isfinite(logdet)) return logdet;
  // alpha = L^-T L^-1 y.
  std::vector<double>& x = *alpha;
  x = y;
  ForwardSolve(u.data(), n, x.data(), 1);
  double fit = 0;
  for (int i = 0; i < n; ++i) fit += x[i] * x[i];
  for (int i = n - 1; i >= 0; --i) {
    const double* ui = &u[static_cast<size_t>(i) * n];
    double s = x[i];
    for (int p = i + 1; p < n; ++p) s -= ui[p] * x[p];
    x[i] = s / ui[i];
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
  // The picked rows' active knobs, knob-major: the hyper-parameter fit uses the leading rows.
  const size_t m = active_.size();
  const int n = static_cast<int>(pick.size());
  std::vector<int32_t> packed(static_cast<size_t>(n) * m);
  for (int i = 0; i < n; ++i)
    for (size_t q = 0; q < m; ++q) packed[q * n + i] = rows[pick[i]][active_[q]];
  std::vector<double> t(n);
  for (int i = 0; i < n; ++i) t[i] = y[pick[i]];
  std::vector<double> l, alpha;
  if (tune && m > 0 && !pick.empty()) {
    // The hyper-parameters are fitted on the leading rows (the best ones when pick is trimmed).
    const std::vector<double> tt(t.begin(), t.begin() + std::min(n, kTuneRows));
    double best = Factor(packed, n, tt, h_, &l, &alpha);
    // An exponential prior on the weights (MAP rather than maximum likelihood): with few rows
    // the likelihood alone prefers weights so large that nothing correlates.
    auto penalty = [&](const Hyper& h) {
      double p = 0;
      for (int k : active_) p += weight_prior_ * h.theta[k];
      return p;
    };
    best -= penalty(h_);
    bool moved = false;
    auto consider = [&](const Hyper& h) {
      double ll = Factor(packed, n, tt, h, &l, &alpha) - penalty(h);
      if (ll > best + 1e-9) {
        best = ll;
        h_ = h;
        moved = true;
      }
    };
    // Coordinate ascent; a value equal to the current one cannot improve, and a sweep that moved
    // nothing would be repeated exactly by the next.
    for (int sweep = 0; sweep < kSweeps; ++sweep) {
      moved = false;
      for (int k : active_)
        for (double v : kThetaGrid) {
          if (v == h_.theta[k]) continue;
          Hyper h = h_;
          h.theta[k] = v;
          consider(h);
        }
      for (double v : kNoiseGrid) {
        if (v == h_.noise) continue;
        Hyper h = h_;
        h.noise = v;
        consider(h);
      }
      if (!moved) break;
    }
  }
  Hyper h = h_;
  loglik_ = -std::numeric_limits<double>::infinity();
  for (int attempt = 0; attempt < 6 && !std::isfinite(loglik_); ++attempt, h.noise *= 10)
    loglik_ = Factor(packed, n, t, h, &u_, &alpha_);
  prior_var_ = h.scale;
  n_ = std::isfinite(loglik_) ? n : 0;  // else predict the prior rather than garbage
  train_.resize(packed.size());
  for (int i = 0; i < n; ++i)
    for (size_t q = 0; q < m; ++q) train_[i * m + q] = packed[q * n + i];
  Similarities(h, &sim_);
}

void GpModel::Predict(const std::vector<Row>& rows, std::vector<float>* mean,
                      std::vector<float>* sd) const {
  const int n = n_;
  mean->assign(rows.size(), 0.0f);
  sd->assign(rows.size(), 1.0f);
  if (n == 0) return;
  const size_t m = active_.size();
  // Per block of rows: k* for every training row (row i of `ks`: training row i against the
  // block), mean = k*.alpha, v = L^-1 k*, var = k(x, x) - v.v.
  std::vector<double> ks(static_cast<size_t>(n) * kPredictBlock);
  std::vector<int32_t> packed(static_cast<size_t>(kPredictBlock) * m);
  std::vector<double> mu(kPredictBlock), vv(kPredictBlock);
  for (size_t begin = 0; begin < rows.size(); begin += kPredictBlock) {
    const int cols = static_cast<int>(std::min<size_t>(kPredictBlock, rows.size() - begin));
    for (int c = 0; c < cols; ++c)
      for (size_t q = 0; q < m; ++q) packed[q * kPredictBlock + c] = rows[begin + c][active_[q]];
    std::fill(mu.begin(), mu.end(), 0.0);
    for (int i = 0; i < n; ++i) {
      double* ki = &ks[static_cast<size_t>(i) * cols];
      KernelRow(h_, sim_, train_.data() + i * m, packed.data(), kPredictBlock, cols, ki);
      for (int c = 0; c < cols; ++c) mu[c] += ki[c] * alpha_[i];
    }
    ForwardSolve(u_.data(), n, ks.data(), cols);
    std::fill(vv.begin(), vv.end(), 0.0);
    for (int i = 0; i < n; ++i) {
      const double* ki = &ks[static_cast<size_t>(i) * cols];
      for (int c = 0; c < cols; ++c) vv[c] += ki[c] * ki[c];
    }
    for (int c = 0; c < cols; ++c) {
      (*mean)[begin + c] = static_cast<float>(mu[c]);
      (*sd)[begin + c] = static_cast<float>(std::sqrt(std::max(1e-9, prior_var_ - vv[c])));
    }
  }
}

}  // namespace kiln::agent
