// LibTorch modules behind CostModel and PolicyNet; included only by agent/policy/*.cc.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <random>
#include <vector>

#include "agent/policy/cost_model.h"
#include "agent/policy/policy_net.h"

namespace kiln::agent {

// Runs LibTorch single-threaded (once per process): the agent must not compete with workers.
void UseOneTorchThread();

// A tensor of uniform values in [-bound, bound] from `rng` (deterministic, unlike the global
// torch generator that parallel runs would share).
torch::Tensor UniformTensor(std::vector<int64_t> shape, double bound, std::mt19937_64& rng);

// Parameters kept in one flat tensor (so an optimiser step is a handful of operations, not a
// handful per layer) and handed out as views.
class FlatParameters {
 public:
  // Reserves a [shape] block initialised uniformly in [-bound, bound] (zeros when bound == 0).
  int Add(std::vector<int64_t> shape, double bound);
  torch::Tensor Build(std::mt19937_64& rng);  // the flat tensor, once every block is added
  torch::Tensor View(const torch::Tensor& flat, int block) const;

 private:
  struct Block {
    std::vector<int64_t> shape;
    int64_t offset, size;
    double bound;
  };
  std::vector<Block> blocks_;
  int64_t total_ = 0;
};

// `members` independent MLPs evaluated as one batched product: [n, in] -> [members, n].
struct EnsembleImpl : torch::nn::Module {
  EnsembleImpl(int members, int in, int hidden, std::mt19937_64& rng);
  torch::Tensor forward(const torch::Tensor& x);
  FlatParameters layout;
  torch::Tensor theta;
};
TORCH_MODULE(Ensemble);

struct CostModelImpl {
  CostModelImpl(int members, int hidden, std::mt19937_64& rng);
  Ensemble net;
  torch::optim::Adam opt;
};

// Scores each (knob, value) token from its features and the context; a value head reads the
// context alone (the PPO baseline).
struct PolicyModuleImpl : torch::nn::Module {
  explicit PolicyModuleImpl(std::mt19937_64& rng);
  torch::Tensor forward(const torch::Tensor& tokens);  // [T, kTokenFeatures] -> [T]
  torch::Tensor Value(const torch::Tensor& context);   // [kContextFeatures] -> scalar
  FlatParameters layout;
  torch::Tensor theta;
};
TORCH_MODULE(PolicyModule);

struct PolicyNetImpl {
  PolicyNetImpl(const SpaceFeatures& f, std::shared_ptr<const SpaceIndex> index,
                std::mt19937_64& rng);
  // Logits of every token: the shared network plus this space's own offsets.
  torch::Tensor AllLogits() { return net->forward(tokens) + bias; }
  // Log-probabilities of rows ([B, K] token ids) and the distribution's entropy.
  std::pair<torch::Tensor, torch::Tensor> LogProbAndEntropy(const torch::Tensor& logits,
                                                            const torch::Tensor& ids);
  torch::Tensor Ids(const std::vector<Row>& rows) const;

  PolicyModule net;
  torch::Tensor bias;     // [T] per-space offsets, learned online (saved, not transferred)
  torch::Tensor tokens;   // [T, kTokenFeatures]
  torch::Tensor context;  // [kContextFeatures]
  torch::Tensor valid;    // [n, K] token ids of the valid configurations (masked mode)
  double log_scale = 0;   // log(all valid / rows in `valid`) when `valid` is a sample
  std::vector<int> offsets, sizes;
  std::unique_ptr<torch::optim::Adam> opt;
};

}  // namespace kiln::agent
