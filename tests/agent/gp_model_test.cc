// The screen's Gaussian-process surrogate: kernel weights fitted to the data, calibrated spread.
#include "agent/policy/gp_model.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace kiln::agent {
namespace {

// Latency depends on knobs 0 and 2 (with an interaction); knob 1 is noise-free but irrelevant.
double Truth(const Row& r) { return 0.3 * r[0] - 0.5 * r[2] + (r[0] == 3 && r[2] == 0 ? -2 : 0); }

std::vector<Row> AllRows() {
  std::vector<Row> rows;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 8; ++b)
      for (int c = 0; c < 3; ++c) rows.push_back({a, b, c});
  return rows;
}

void Sample(int n, std::vector<Row>* rows, std::vector<double>* y) {
  std::vector<Row> all = AllRows();
  std::mt19937_64 rng(7);
  std::shuffle(all.begin(), all.end(), rng);
  rows->assign(all.begin(), all.begin() + n);
  y->clear();
  for (const Row& r : *rows) y->push_back(Truth(r));
}

TEST(GpModel, IgnoresAnIrrelevantKnobAndInterpolates) {
  std::vector<Row> rows;
  std::vector<double> y;
  Sample(40, &rows, &y);
  GpModel gp({4, 8, 3, 1});  // a fourth knob with one value is ignored
  for (Row& r : rows) r.push_back(0);
  gp.Fit(rows, y, /*tune=*/true);
  EXPECT_TRUE(std::isfinite(gp.log_likelihood()));
  EXPECT_EQ(gp.weights()[1], 0.0) << "the irrelevant knob keeps a weight";
  EXPECT_GT(gp.weights()[0], 0.0);
  EXPECT_GT(gp.weights()[2], 0.0);
  // Unmeasured rows are predicted close to the truth, better than their mean would be.
  std::vector<Row> rest;
  for (Row r : AllRows()) {
    r.push_back(0);
    bool seen = false;
    for (const Row& s : rows) seen |= s == r;
    if (!seen) rest.push_back(r);
  }
  std::vector<float> mean, sd;
  gp.Predict(rest, &mean, &sd);
  double err = 0, spread = 0, mu = 0;
  for (size_t i = 0; i < rest.size(); ++i) mu += Truth(rest[i]) / rest.size();
  for (size_t i = 0; i < rest.size(); ++i) {
    err += std::pow(mean[i] - Truth(rest[i]), 2);
    spread += std::pow(mu - Truth(rest[i]), 2);
  }
  EXPECT_LT(err, 0.25 * spread);
}

TEST(GpModel, SpreadIsSmallAtDataAndLargeAwayFromIt) {
  std::vector<Row> rows;
  std::vector<double> y;
  Sample(12, &rows, &y);
  GpModel gp({4, 8, 3});
  std::vector<float> mean, sd;
  gp.Predict(rows, &mean, &sd);  // before any fit: the prior
  for (float s : sd) EXPECT_FLOAT_EQ(s, 1.0f);
  gp.Fit(rows, y, true);
  gp.Predict(rows, &mean, &sd);
  std::vector<float> far_mean, far_sd;
  std::vector<Row> far;
  for (const Row& r : AllRows()) {
    int near = 3;
    for (const Row& s : rows) {
      int diff = (r[0] != s[0]) + (r[1] != s[1]) + (r[2] != s[2]);
      near = std::min(near, diff);
    }
    if (near >= 2) far.push_back(r);
  }
  ASSERT_FALSE(far.empty());
  gp.Predict(far, &far_mean, &far_sd);
  float at_data = 0, away = 0;
  for (float s : sd) at_data = std::max(at_data, s);
  for (float s : far_sd) away += s / far_sd.size();
  EXPECT_LT(at_data, away);
}

TEST(GpModel, DuplicateRowsWithDifferentTargetsDoNotBreakTheFit) {
  GpModel gp({3, 3});
  std::vector<Row> rows = {{0, 0}, {0, 0}, {1, 2}, {2, 1}};
  gp.Fit(rows, {1.0, -1.0, 0.5, 0.2}, true);
  std::vector<float> mean, sd;
  gp.Predict({{0, 0}, {2, 2}}, &mean, &sd);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(std::isfinite(mean[i]));
    EXPECT_TRUE(std::isfinite(sd[i]));
  }
  EXPECT_NEAR(mean[0], 0.0, 0.5);  // the two contradicting measurements average out
}

// The posterior against a direct computation: with the kernel weights left as constructed (no
// tuning) the product kernel is exp(-0.5 sum_k d_k) and the noise 0.01, so mean = k*' K^-1 y and
// var = 1 - k*' K^-1 k* can be solved densely here. Rows are predicted in blocks inside the
// model: 150 rows cross a block boundary, and each must match the same row predicted alone.
TEST(GpModel, PosteriorMatchesADenseSolveAndDoesNotDependOnBatching) {
  const std::vector<int> sizes = {4, 8, 3};
  std::vector<Row> rows;
  std::vector<double> y;
  Sample(20, &rows, &y);
  GpModel gp(sizes);
  gp.Fit(rows, y, /*tune=*/false);
  auto dist = [&](int k, int a, int b) {
    return a == b ? 0.0 : 0.5 + 0.5 * std::abs(a - b) / (sizes[k] - 1.0);
  };
  auto cov = [&](const Row& a, const Row& b) {
    double s = 0;
    for (int k = 0; k < 3; ++k) s += 0.5 * dist(k, a[k], b[k]);
    return std::exp(-s);
  };
  const int n = static_cast<int>(rows.size());
  // Gauss-Jordan on [K | y | k*...] for every query row at once.
  const std::vector<Row> all = AllRows();
  std::vector<Row> query = all;
  query.insert(query.end(), all.begin(), all.begin() + 54);  // 150 rows
  const int q = static_cast<int>(query.size());
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1 + q));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) a[i][j] = cov(rows[i], rows[j]) + (i == j ? 0.01 : 0.0);
    a[i][n] = y[i];
    for (int c = 0; c < q; ++c) a[i][n + 1 + c] = cov(rows[i], query[c]);
  }
  for (int p = 0; p < n; ++p) {
    for (int i = 0; i < n; ++i) {
      if (i == p) continue;
      const double f = a[i][p] / a[p][p];
      for (size_t j = p; j < a[i].size(); ++j) a[i][j] -= f * a[p][j];
    }
  }
  std::vector<float> mean, sd;
  gp.Predict(query, &mean, &sd);
  ASSERT_EQ(mean.size(), query.size());
  for (int c = 0; c < q; ++c) {
    double mu = 0, kk = 0;
    for (int i = 0; i < n; ++i) {
      const double ks = cov(rows[i], query[c]);
      mu += ks * a[i][n] / a[i][i];
      kk += ks * a[i][n + 1 + c] / a[i][i];
    }
    EXPECT_NEAR(mean[c], mu, 1e-4) << "row " << c;
    EXPECT_NEAR(sd[c], std::sqrt(std::max(1e-9, 1 - kk)), 1e-4) << "row " << c;
    std::vector<float> one_mean, one_sd;
    gp.Predict({query[c]}, &one_mean, &one_sd);
    EXPECT_EQ(one_mean[0], mean[c]);
    EXPECT_EQ(one_sd[0], sd[c]);
  }
}

}  // namespace
}  // namespace kiln::agent
