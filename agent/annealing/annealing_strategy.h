// Simulated annealing over single-knob moves, with restarts when a neighbourhood is used up.
#pragma once

#include <memory>

#include "agent/strategy.h"

namespace kiln::agent {

std::unique_ptr<Strategy> NewAnnealingStrategy(StrategyContext context);

}  // namespace kiln::agent
