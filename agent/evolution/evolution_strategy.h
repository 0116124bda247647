// Steady-state evolutionary search: tournament selection, uniform crossover, mutation.
#pragma once

#include <memory>

#include "agent/strategy.h"

namespace kiln::agent {

std::unique_ptr<Strategy> NewEvolutionStrategy(StrategyContext context);

}  // namespace kiln::agent
