// A Gaussian-process surrogate over discrete knob rows: calibrated uncertainty for the screen.
//
// The cost model's ensemble is confident wherever its members agree, which on small categorical
// spaces includes regions nobody has measured (a plateau's untried knob values look like the
// plateau). A GP's posterior spread grows with distance from what was measured, under a kernel
// whose per-knob weights are fitted to the measurements (a knob that does not matter gets weight
// zero, so varying it earns no spread). The kernel is exp(-sum_k theta_k d_k(a, b)) with
// d_k = 0 for equal values and 0.5 + 0.5 |i_a - i_b| / (size_k - 1) otherwise (i = position in
// the knob's domain): categorical and ordinal at once.
#pragma once

#include <cstdint>
#include <vector>

#include "agent/space_index.h"

namespace kiln::agent {

class GpModel {
 public:
  // `sizes`: each knob's domain size; knobs with one value are ignored.
  explicit GpModel(std::vector<int> sizes);

  // Conditions on rows with targets `y` (standardised log latency, lower is better). With
  // `tune`, the per-knob weights and the noise are refitted first by coordinate ascent on the
  // log marginal likelihood over a small grid (starting from the current ones). At most
  // `max_rows` rows are used: the best half and the most recent rest.
  void Fit(const std::vector<Row>& rows, const std::vector<double>& y, bool tune,
           int max_rows = 128);
  // Posterior mean and standard deviation for each row. Before any Fit: mean 0, sd 1.
  void Predict(const std::vector<Row>& rows, std::vector<float>* mean,
               std::vector<float>* sd) const;

  // The rate of an exponential prior on each kernel weight: the fit maximises the likelihood
  // minus rate * sum of weights, so that few rows do not decorrelate everything.
  void set_weight_prior(double rate) { weight_prior_ = rate; }
  const std::vector<double>& weights() const { return h_.theta; }
  double noise() const { return h_.noise; }
  // Log marginal likelihood of the current fit (for tests).
  double log_likelihood() const { return loglik_; }

 private:
  struct Hyper {
    std::vector<double> theta;  // per knob (inactive ones stay 0)
    double scale = 1;           // prior variance
    double noise = 0.01;
  };
  // exp(-theta_k d_k(a, b)) for every active knob k and value pair, under `h`: the kernel's
  // per-knob similarities, looked up instead of exponentiated for each row pair.
  void Similarities(const Hyper& h, std::vector<double>* sim) const;
  // Covariances of row `a` (its active knobs' values) with `cols` rows whose values are stored
  // knob-major (the value of knob q of row c at bq[q * stride + c]) into out[0..cols).
  void KernelRow(const Hyper& h, const std::vector<double>& sim, const int32_t* a,
                 const int32_t* bq, size_t stride, int cols, double* out) const;
  // Cholesky factor of the kernel matrix of the first n = y.size() rows of `packed` (active
  // knobs' values, knob-major with stride `stride`) under `h` into `u` (upper, row-major: U = L^T,
  // so each column of L is contiguous), and alpha = K^-1 y. Returns the log marginal likelihood
  // (-inf when not positive definite).
  double Factor(const std::vector<int32_t>& packed, size_t stride, const std::vector<double>& y,
                const Hyper& h, std::vector<double>* u, std::vector<double>* alpha) const;

  std::vector<int> sizes_;
  std::vector<int> active_;   // knobs with more than one value
  std::vector<int> asize_;    // their domain sizes
  std::vector<int> offset_;   // where each active knob's value pairs start in a similarity table
  std::vector<double> dist_;  // d_k(a, b) at offset_[q] + a * size + b
  Hyper h_;
  double loglik_ = 0;
  double prior_var_ = 1;
  double weight_prior_ = 1.0;
  int n_ = 0;                      // rows conditioned on
  std::vector<int32_t> train_;     // their active knobs' values, row after row
  std::vector<double> sim_;        // the fitted kernel's similarities
  std::vector<double> u_, alpha_;  // Cholesky factor (U = L^T, row-major) and K^-1 y
};

}  // namespace kiln::agent
