#include "agent/policy/sampler.h"

#include <algorithm>
#include <cmath>
#include <queue>

namespace kiln::agent {

void Sampler::SetLogits(std::vector<float> logits, double log_z) {
  logits_ = std::move(logits);
  knob_log_softmax_.assign(features_.num_knobs(), {});
  for (int k = 0; k < features_.num_knobs(); ++k) {
    const float* l = logits_.data() + features_.offset(k);
    float mx = *std::max_element(l, l + features_.size(k));
    double sum = 0;
    for (int i = 0; i < features_.size(k); ++i) sum += std::exp(l[i] - mx);
    for (int i = 0; i < features_.size(k); ++i)
      knob_log_softmax_[k].push_back(l[i] - mx - static_cast<float>(std::log(sum)));
  }
  log_z_ = static_cast<float>(log_z);
}

float Sampler::Score(const Row& r) const {
  float s = 0;
  for (int k = 0; k < features_.num_knobs(); ++k) s += logits_[features_.offset(k) + r[k]];
  return s;
}

float Sampler::LogProb(const Row& r) const {
  if (index_.enumerated() && !index_.rows().empty()) return Score(r) - log_z_;
  float s = 0;
  for (int k = 0; k < features_.num_knobs(); ++k) s += knob_log_softmax_[k][r[k]];
  return s;
}

std::vector<Row> Sampler::Draw(int m, const Ledger& ledger, std::mt19937_64& rng) const {
  std::vector<Row> out;
  std::uniform_real_distribution<double> u(1e-12, 1.0);
  if (index_.enumerated()) {
    // Gumbel-top-m: the m largest (score + Gumbel noise) are m draws without replacement.
    using Item = std::pair<double, size_t>;
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> top;
    const auto& rows = index_.rows();
    for (size_t i = 0; i < rows.size(); ++i) {
      double key = Score(rows[i]) - std::log(-std::log(u(rng)));
      if (static_cast<int>(top.size()) < m) {
        if (!ledger.Seen(rows[i])) top.push({key, i});
      } else if (key > top.top().first && !ledger.Seen(rows[i])) {
        top.pop();
        top.push({key, i});
      }
    }
    for (; !top.empty(); top.pop()) out.push_back(rows[top.top().second]);
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::vector<uint64_t> codes;
  Row r(features_.num_knobs());
  for (int t = 0; static_cast<int>(out.size()) < m && t < m * 20; ++t) {
    for (int k = 0; k < features_.num_knobs(); ++k) {
      double x = u(rng), acc = 0;
      int v = features_.size(k) - 1;
      for (int i = 0; i < features_.size(k); ++i)
        if ((acc += std::exp(knob_log_softmax_[k][i])) >= x) {
          v = i;
          break;
        }
      r[k] = v;
    }
    uint64_t code = index_.Code(r);
    if (ledger.Seen(r) || std::find(codes.begin(), codes.end(), code) != codes.end()) continue;
    if (!index_.IsValid(r)) continue;
    codes.push_back(code);
    out.push_back(r);
  }
  return out;
}

bool SpaceFilling(const Ledger& ledger, const std::vector<Row>& chosen, int tries,
                  std::mt19937_64& rng, Row* out) {
  int best = -1;
  Row r;
  for (int t = 0; t < tries; ++t) {
    if (!ledger.RandomUnseen(rng, &r)) break;
    int nearest = static_cast<int>(r.size()) + 1;
    for (const Row& c : chosen) {
      int d = 0;
      for (size_t k = 0; k < r.size(); ++k) d += r[k] != c[k];
      nearest = std::min(nearest, d);
    }
    if (nearest > best) {
      best = nearest;
      *out = r;
    }
  }
  return best >= 0;
}

}  // namespace kiln::agent
