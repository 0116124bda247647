#include "agent/policy/cost_model.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>

#include "agent/policy/features.h"
#include "agent/policy/torch_modules.h"

namespace kiln::agent {

void UseOneTorchThread() {
  static std::once_flag once;
  std::call_once(once, [] {
    torch::set_num_threads(1);
    // LibTorch's BLAS (OpenBLAS on Debian) keeps its own thread pool, which only costs time on
    // matrices this small; trial children are separate processes, so their baselines keep theirs.
    using SetThreads = void (*)(int);
    if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
      f(1);
  });
}

torch::Tensor UniformTensor(std::vector<int64_t> shape, double bound, std::mt19937_64& rng) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  std::uniform_real_distribution<float> u(-bound, bound);
  for (auto& x : v) x = u(rng);
  return torch::from_blob(v.data(), shape, torch::kFloat32).clone();
}

int FlatParameters::Add(std::vector<int64_t> shape, double bound) {
  int64_t size = 1;
  for (int64_t d : shape) size *= d;
  blocks_.push_back({std::move(shape), total_, size, bound});
  total_ += size;
  return static_cast<int>(blocks_.size()) - 1;
}

torch::Tensor FlatParameters::Build(std::mt19937_64& rng) {
  std::vector<float> v(total_, 0.0f);
  for (const auto& b : blocks_) {
    std::uniform_real_distribution<float> u(-b.bound, b.bound);
    if (b.bound > 0)
      for (int64_t i = 0; i < b.size; ++i) v[b.offset + i] = u(rng);
  }
  return torch::from_blob(v.data(), {total_}, torch::kFloat32).clone();
}

torch::Tensor FlatParameters::View(const torch::Tensor& flat, int block) const {
  const Block& b = blocks_[block];
  return flat.narrow(0, b.offset, b.size).view(b.shape);
}

namespace {
enum EnsembleBlock { kW1, kB1, kW2, kB2, kW3, kB3 };
}  // namespace

EnsembleImpl::EnsembleImpl(int members, int in, int hidden, std::mt19937_64& rng) {
  layout.Add({members, in, hidden}, 1 / std::sqrt(in));
  layout.Add({members, 1, hidden}, 0);
  layout.Add({members, hidden, hidden}, 1 / std::sqrt(hidden));
  layout.Add({members, 1, hidden}, 0);
  layout.Add({members, hidden, 2}, 1 / std::sqrt(hidden));  // log latency, failure logit
  layout.Add({members, 1, 2}, 0);
  theta = register_parameter("theta", layout.Build(rng));
}

torch::Tensor EnsembleImpl::forward(const torch::Tensor& x) {
  auto p = [&](int b) { return layout.View(theta, b); };
  torch::Tensor h = torch::relu(torch::matmul(x, p(kW1)) + p(kB1));  // [E, n, H]
  h = torch::relu(torch::baddbmm(p(kB2), h, p(kW2)));
  return torch::baddbmm(p(kB3), h, p(kW3));
}

CostModelImpl::CostModelImpl(int members, int hidden, std::mt19937_64& rng)
    : net(members, kConfigFeatures, hidden, rng),
      opt(net->parameters(), torch::optim::AdamOptions(3e-3).weight_decay(1e-4)) {}

CostModel::CostModel(uint64_t seed, int members, int hidden) : members_(members) {
  UseOneTorchThread();
  std::mt19937_64 rng(seed ^ 0xc057c057ULL);
  impl_ = std::make_unique<CostModelImpl>(members, hidden, rng);
}

CostModel::~CostModel() = default;

double CostModel::Train(const std::vector<float>& x, const std::vector<float>& y,
                        const std::vector<uint8_t>& ok, const std::vector<uint8_t>& member_mask,
                        int steps, std::mt19937_64& rng) {
  const int n = static_cast<int>(y.size());
  if (n < 2 || steps <= 0) return 0;
  constexpr int kRows = 128, kPairs = 256;
  const int b = std::min(n, kRows);
  const bool masked = member_mask.size() == static_cast<size_t>(n) * members_;
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  double last = 0;
  for (int s = 0; s < steps; ++s) {
    // A minibatch of rows; per member, ordered pairs among the rows of its bootstrap.
    std::vector<int> pick(b);
    if (b == n) {
      pick = perm;
    } else {
      std::sample(perm.begin(), perm.end(), pick.begin(), b, rng);
    }
    std::vector<float> xb(static_cast<size_t>(b) * kConfigFeatures), yb(b), mb(members_ * b), fb(b),
        wb(members_ * b);
    for (int i = 0; i < b; ++i) {
      std::copy_n(x.begin() + static_cast<size_t>(pick[i]) * kConfigFeatures, kConfigFeatures,
                  xb.begin() + static_cast<size_t>(i) * kConfigFeatures);
      yb[i] = ok[pick[i]] ? y[pick[i]] : 0;
      fb[i] = !ok[pick[i]];
      for (int m = 0; m < members_; ++m) {
        wb[m * b + i] = !masked || member_mask[pick[i] * members_ + m];
        mb[m * b + i] = ok[pick[i]] && wb[m * b + i];
      }
    }
    std::vector<int64_t> better, worse;
    std::uniform_int_distribution<int> u(0, b - 1);
    for (int m = 0; m < members_; ++m) {
      auto in = [&](int i) { return !masked || member_mask[pick[i] * members_ + m]; };
      int made = 0;
      for (int t = 0; made < kPairs && t < kPairs * 4; ++t) {
        int i = u(rng), j = u(rng);
        if (!in(i) || !in(j)) continue;
        if (!ok[pick[i]] || !ok[pick[j]] || yb[i] == yb[j]) continue;
        if (yb[j] < yb[i]) std::swap(i, j);
        better.push_back(i);
        worse.push_back(j);
        ++made;
      }
      for (; made < kPairs; ++made) {  // nothing to rank: neutral pairs
        better.push_back(0);
        worse.push_back(0);
      }
    }
    auto xt = torch::from_blob(xb.data(), {b, kConfigFeatures}, torch::kFloat32);
    auto yt = torch::from_blob(yb.data(), {1, b}, torch::kFloat32);
    auto mt = torch::from_blob(mb.data(), {members_, b}, torch::kFloat32);
    auto bt = torch::from_blob(better.data(), {members_, kPairs}, torch::kInt64);
    auto wt = torch::from_blob(worse.data(), {members_, kPairs}, torch::kInt64);
    auto ft = torch::from_blob(fb.data(), {1, b}, torch::kFloat32).expand({members_, b});
    auto weight = torch::from_blob(wb.data(), {members_, b}, torch::kFloat32);
    torch::Tensor out = impl_->net->forward(xt);  // [E, b, 2]
    torch::Tensor pred = out.select(2, 0), fail = out.select(2, 1);
    // Ranking among successes, a light fit of their values, and a failure classifier.
    torch::Tensor rank = torch::softplus(pred.gather(1, bt) - pred.gather(1, wt)).mean();
    torch::Tensor fit = ((pred - yt).pow(2) * mt).sum() / (mt.sum() + 1e-6);
    torch::Tensor bce =
        torch::binary_cross_entropy_with_logits(fail, ft, weight, {}, at::Reduction::Sum) /
        (weight.sum() + 1e-6);
    torch::Tensor loss = rank + 0.25 * fit + 0.5 * bce;
    impl_->opt.zero_grad();
    loss.backward();
    impl_->opt.step();
    if (s == steps - 1) last = loss.item<double>();
  }
  return last;
}

void CostModel::Predict(const float* x, int n, std::vector<float>* mean, std::vector<float>* spread,
                        std::vector<float>* fail) const {
  torch::NoGradGuard no_grad;
  mean->assign(n, 0);
  if (spread) spread->assign(n, 0);
  if (fail) fail->assign(n, 0);
  if (n == 0) return;
  auto xt = torch::from_blob(const_cast<float*>(x), {n, kConfigFeatures}, torch::kFloat32);
  torch::Tensor out = impl_->net->forward(xt);
  torch::Tensor pred = out.select(2, 0);
  if (fail) {
    torch::Tensor p = torch::sigmoid(out.select(2, 1)).mean(0).contiguous();
    std::copy_n(p.data_ptr<float>(), n, fail->begin());
  }
  torch::Tensor mu = pred.mean(0).contiguous();
  std::copy_n(mu.data_ptr<float>(), n, mean->begin());
  if (spread && members_ > 1) {
    torch::Tensor sd = pred.std(0, /*unbiased=*/false).contiguous();
    std::copy_n(sd.data_ptr<float>(), n, spread->begin());
  }
}

}  // namespace kiln::agent
