// Random search without replacement over the valid configurations: the baseline strategy.
#pragma once

#include <memory>

#include "agent/strategy.h"

namespace kiln::agent {

std::unique_ptr<Strategy> NewRandomStrategy(StrategyContext context);

}  // namespace kiln::agent
