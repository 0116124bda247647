#include "agent/policy/policy_net.h"

#include <algorithm>
#include <cmath>

#include "agent/policy/torch_modules.h"

namespace kiln::agent {
namespace {

constexpr double kClip = 0.2;  // PPO ratio clip
constexpr double kValueCoef = 0.5;
constexpr double kEntropyCoef = 0.01;

constexpr int kHidden = 64, kValueHidden = 16;
enum PolicyBlock { kW1, kB1, kW2, kB2, kW3, kB3, kV1, kC1, kV2, kC2 };

}  // namespace

PolicyModuleImpl::PolicyModuleImpl(std::mt19937_64& rng) {
  layout.Add({kTokenFeatures, kHidden}, 1 / std::sqrt(kTokenFeatures));
  layout.Add({kHidden}, 0);
  layout.Add({kHidden, kHidden}, 1 / std::sqrt(kHidden));
  layout.Add({kHidden}, 0);
  layout.Add({kHidden, 1}, 0.1 / std::sqrt(kHidden));  // starts close to uniform
  layout.Add({1}, 0);
  layout.Add({kContextFeatures, kValueHidden}, 1 / std::sqrt(kContextFeatures));
  layout.Add({kValueHidden}, 0);
  layout.Add({kValueHidden, 1}, 1 / std::sqrt(kValueHidden));
  layout.Add({1}, 0);
  theta = register_parameter("theta", layout.Build(rng));
}

torch::Tensor PolicyModuleImpl::forward(const torch::Tensor& tokens) {
  auto p = [&](int b) { return layout.View(theta, b); };
  torch::Tensor h = torch::relu(torch::addmm(p(kB1), tokens, p(kW1)));
  h = torch::relu(torch::addmm(p(kB2), h, p(kW2)));
  return torch::addmm(p(kB3), h, p(kW3)).squeeze(1);
}

torch::Tensor PolicyModuleImpl::Value(const torch::Tensor& context) {
  auto p = [&](int b) { return layout.View(theta, b); };
  torch::Tensor h = torch::relu(torch::addmm(p(kC1), context.unsqueeze(0), p(kV1)));
  return torch::addmm(p(kC2), h, p(kV2)).squeeze();
}

PolicyNetImpl::PolicyNetImpl(const SpaceFeatures& f, std::shared_ptr<const SpaceIndex> index,
                             std::mt19937_64& rng)
    : net(rng) {
  std::vector<float> t = f.Tokens();
  tokens = torch::from_blob(t.data(), {f.num_tokens(), kTokenFeatures}, torch::kFloat32).clone();
  auto c = f.context();
  context = torch::from_blob(c.data(), {kContextFeatures}, torch::kFloat32).clone();
  bias = torch::zeros({f.num_tokens()}, torch::requires_grad());
  for (int k = 0; k < f.num_knobs(); ++k) {
    offsets.push_back(f.offset(k));
    sizes.push_back(f.size(k));
  }
  if (index->enumerated() && !index->rows().empty()) {
    std::vector<Row> rows = index->rows();
    if (rows.size() > PolicyNet::kMaskedRows) {
      std::shuffle(rows.begin(), rows.end(), rng);
      rows.resize(PolicyNet::kMaskedRows);
      log_scale = std::log(static_cast<double>(index->rows().size()) / rows.size());
    }
    valid = Ids(rows);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(net->parameters(), std::make_unique<torch::optim::AdamOptions>(3e-3));
  groups.emplace_back(std::vector<torch::Tensor>{bias},
                      std::make_unique<torch::optim::AdamOptions>(3e-2));
  opt = std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(3e-3));
}

torch::Tensor PolicyNetImpl::Ids(const std::vector<Row>& rows) const {
  const int64_t k = static_cast<int64_t>(offsets.size());
  std::vector<int64_t> ids(rows.size() * k);
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t j = 0; j < k; ++j) ids[i * k + j] = offsets[j] + rows[i][j];
  return torch::from_blob(ids.data(), {static_cast<int64_t>(rows.size()), k}, torch::kInt64)
      .clone();
}

std::pair<torch::Tensor, torch::Tensor> PolicyNetImpl::LogProbAndEntropy(
    const torch::Tensor& logits, const torch::Tensor& ids) {
  const int64_t k = static_cast<int64_t>(offsets.size());
  if (valid.defined()) {  // exact: normalised over the valid configurations
    torch::Tensor all = logits.index_select(0, valid.view(-1)).view({-1, k}).sum(1);
    torch::Tensor log_z = torch::logsumexp(all, 0) + log_scale;
    torch::Tensor logp_all = all - log_z;
    torch::Tensor entropy = -((logp_all + log_scale).exp() * logp_all).sum();
    torch::Tensor mine = logits.index_select(0, ids.view(-1)).view({-1, k}).sum(1) - log_z;
    return {mine, entropy};
  }
  std::vector<torch::Tensor> parts;  // factorised: a softmax per knob
  torch::Tensor entropy = torch::zeros({});
  for (size_t j = 0; j < offsets.size(); ++j) {
    torch::Tensor lp = torch::log_softmax(logits.narrow(0, offsets[j], sizes[j]), 0);
    entropy = entropy - (lp.exp() * lp).sum();
    parts.push_back(lp);
  }
  torch::Tensor logp_tokens = torch::cat(parts);
  return {logp_tokens.index_select(0, ids.view(-1)).view({-1, k}).sum(1), entropy};
}

PolicyNet::PolicyNet(const SpaceFeatures& features, std::shared_ptr<const SpaceIndex> index,
                     uint64_t seed) {
  UseOneTorchThread();
  std::mt19937_64 rng(seed ^ 0x9011c7ULL);
  impl_ = std::make_unique<PolicyNetImpl>(features, std::move(index), rng);
}

PolicyNet::~PolicyNet() = default;

std::vector<float> PolicyNet::Logits() const {
  torch::NoGradGuard no_grad;
  torch::Tensor l = impl_->AllLogits().contiguous();
  return std::vector<float>(l.data_ptr<float>(), l.data_ptr<float>() + l.numel());
}

double PolicyNet::LogNormalizer() const {
  torch::NoGradGuard no_grad;
  if (!impl_->valid.defined()) return 0;
  const int64_t k = static_cast<int64_t>(impl_->offsets.size());
  torch::Tensor all =
      impl_->AllLogits().index_select(0, impl_->valid.view(-1)).view({-1, k}).sum(1);
  return torch::logsumexp(all, 0).item<double>() + impl_->log_scale;
}

std::vector<float> PolicyNet::LogProb(const std::vector<Row>& rows) const {
  torch::NoGradGuard no_grad;
  if (rows.empty()) return {};
  auto [lp, entropy] = impl_->LogProbAndEntropy(impl_->AllLogits(), impl_->Ids(rows));
  lp = lp.contiguous();
  return std::vector<float>(lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel());
}

namespace {

// The PPO objective: clipped surrogate, value regression, entropy bonus.
torch::Tensor PpoLoss(PolicyNetImpl& p, const torch::Tensor& ids, const torch::Tensor& old_logp,
                      const torch::Tensor& reward, PpoStats* stats) {
  auto [logp, entropy] = p.LogProbAndEntropy(p.AllLogits(), ids);
  torch::Tensor value = p.net->Value(p.context);
  torch::Tensor adv = reward - value.detach();
  if (adv.numel() > 1) adv = (adv - adv.mean()) / (adv.std() + 1e-6);
  torch::Tensor ratio = torch::exp(logp - old_logp);
  torch::Tensor surr =
      torch::min(ratio * adv, torch::clamp(ratio, 1 - kClip, 1 + kClip) * adv).mean();
  torch::Tensor value_loss = (value - reward).pow(2).mean();
  torch::Tensor loss = -surr + kValueCoef * value_loss - kEntropyCoef * entropy;
  if (stats) {
    stats->loss = loss.item<double>();
    stats->entropy = entropy.item<double>();
    stats->value_loss = value_loss.item<double>();
    stats->mean_reward = reward.mean().item<double>();
  }
  return loss;
}

}  // namespace

PpoStats PolicyNet::Update(const std::vector<PpoSample>& batch, int epochs) {
  PpoStats stats;
  if (batch.empty()) return stats;
  std::vector<Row> rows;
  std::vector<float> old_logp, reward;
  for (const auto& s : batch) {
    rows.push_back(s.row);
    old_logp.push_back(s.old_logp);
    reward.push_back(s.reward);
  }
  const int64_t n = static_cast<int64_t>(batch.size());
  torch::Tensor ids = impl_->Ids(rows);
  torch::Tensor old_t = torch::from_blob(old_logp.data(), {n}, torch::kFloat32).clone();
  torch::Tensor reward_t = torch::from_blob(reward.data(), {n}, torch::kFloat32).clone();
  for (int e = 0; e < epochs; ++e) {
    torch::Tensor loss = PpoLoss(*impl_, ids, old_t, reward_t, e == 0 ? &stats : nullptr);
    impl_->opt->zero_grad();
    loss.backward();
    impl_->opt->step();
  }
  return stats;
}

double PolicyNet::Loss(const std::vector<PpoSample>& batch) const {
  torch::NoGradGuard no_grad;
  std::vector<Row> rows;
  std::vector<float> old_logp, reward;
  for (const auto& s : batch) {
    rows.push_back(s.row);
    old_logp.push_back(s.old_logp);
    reward.push_back(s.reward);
  }
  const int64_t n = static_cast<int64_t>(batch.size());
  PpoStats stats;
  PpoLoss(*impl_, impl_->Ids(rows), torch::from_blob(old_logp.data(), {n}, torch::kFloat32),
          torch::from_blob(reward.data(), {n}, torch::kFloat32), &stats);
  return stats.loss;
}

double PolicyNet::Imitate(const std::vector<Row>& rows, int steps) {
  if (rows.empty()) return 0;
  torch::Tensor ids = impl_->Ids(rows);
  double last = 0;
  for (int s = 0; s < steps; ++s) {  // the shared network only: this space's offsets stay put
    auto [logp, entropy] = impl_->LogProbAndEntropy(impl_->net->forward(impl_->tokens), ids);
    torch::Tensor loss = -logp.mean() - kEntropyCoef * entropy;
    impl_->opt->zero_grad();
    loss.backward();
    impl_->opt->step();
    last = loss.item<double>();
  }
  return last;
}

}  // namespace kiln::agent
