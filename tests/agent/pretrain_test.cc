// Pre-training a checkpoint, and the report on held-out sets that says whether it will transfer.
#include "agent/pretrain/pretrain.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <regex>
#include <sstream>

#include "gtest/gtest.h"

namespace kiln::agent {
namespace {

// A recorded landscape over two knobs whose latency falls with TILE and rises with VEC; with
// `reversed` the other way round. `chip` names the device it was "measured" on.
TrainingSet Landscape(const std::string& name, const std::string& chip, bool reversed) {
  TrainingSet t;
  t.name = name;
  t.space.AddKnob("TILE", {1, 2, 4, 8, 16, 32});
  t.space.AddKnob("VEC", {1, 2, 4, 8});
  t.chip.set_model(chip);
  t.chip.set_chip_type("gpu");
  for (int64_t tile : {1, 2, 4, 8, 16, 32})
    for (int64_t vec : {1, 2, 4, 8}) {
      t.configs.push_back({{"TILE", tile}, {"VEC", vec}});
      const double speed = std::log2(tile) - 0.5 * std::log2(vec);
      t.median_us.push_back(100.0 * std::exp(reversed ? speed : -speed));
    }
  return t;
}

double HeldOutAccuracy(const std::string& log, const std::string& name) {
  std::smatch m;
  const std::regex re("held out " + name + " +[0-9]+ configs  rank accuracy ([0-9.]+)");
  return std::regex_search(log, m, re) ? std::stod(m[1]) : -1;
}

TEST(Pretrain, ReportsHowWellTheCheckpointRanksHeldOutSets) {
  const std::string out = ::testing::TempDir() + "/pretrain" + std::to_string(::getpid()) + ".pt";
  PretrainOptions o;
  o.cost_steps = 200;
  o.policy_steps = 20;
  std::ostringstream log;
  auto status =
      Pretrain({Landscape("a", "chip-a", false), Landscape("b", "chip-b", false)}, o, out, &log,
               {Landscape("like", "chip-c", false), Landscape("unlike", "chip-c", true)});
  ASSERT_TRUE(status.ok()) << status;
  const double like = HeldOutAccuracy(log.str(), "like");
  const double unlike = HeldOutAccuracy(log.str(), "unlike");
  EXPECT_GT(like, 0.8) << log.str();
  EXPECT_GE(unlike, 0.0) << log.str();
  EXPECT_LT(unlike, 0.2) << log.str();
  EXPECT_NE(log.str().find("favourites: best at the"), std::string::npos) << log.str();
  std::remove(out.c_str());
}

TEST(Pretrain, AHeldOutSetWithTooFewRecordsIsAnError) {
  TrainingSet tiny = Landscape("tiny", "chip-c", false);
  tiny.configs.resize(1);
  tiny.median_us.resize(1);
  const std::string out = ::testing::TempDir() + "/pretrain-bad" + std::to_string(::getpid());
  auto status =
      Pretrain({Landscape("a", "chip-a", false)}, PretrainOptions(), out, nullptr, {tiny});
  EXPECT_FALSE(status.ok());
  EXPECT_NE(std::string(status.message()).find("tiny"), std::string::npos) << status;
}

}  // namespace
}  // namespace kiln::agent
