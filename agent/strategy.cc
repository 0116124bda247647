#include "agent/strategy.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/random/random_strategy.h"

namespace kiln::agent {

std::vector<std::string> StrategyNames() { return {"random"}; }

absl::Status CheckStrategyName(const std::string& name) {
  if (name.empty() || name == "default") return absl::OkStatus();
  for (const auto& n : StrategyNames())
    if (n == name) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("strategy: unknown strategy '", name,
                                                 "'; known: default, ",
                                                 absl::StrJoin(StrategyNames(), ", ")));
}

absl::StatusOr<std::unique_ptr<Strategy>> NewStrategy(const std::string& name,
                                                      StrategyContext context) {
  auto status = CheckStrategyName(name);
  if (!status.ok()) return status;
  std::string resolved = (name.empty() || name == "default") ? kDefaultStrategy : name;
  if (resolved == "random") return NewRandomStrategy(std::move(context));
  return absl::InternalError(absl::StrCat("strategy ", resolved, " has no factory"));
}

}  // namespace kiln::agent
