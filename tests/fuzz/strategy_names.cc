// The strategy-name check for the fuzz build. agent/strategy.cc links every strategy and
// LibTorch, which this clang build does not compile; request validation needs only whether a
// name is one the coordinator knows, and checkpoint lookup (a file system question) is not what
// the validation fuzzer explores.
#include "absl/strings/str_cat.h"
#include "agent/strategy.h"

namespace kiln::agent {

absl::Status CheckStrategyName(const std::string& name) {
  if (name.empty() || name == "default") return absl::OkStatus();
  const size_t colon = name.find(':');
  const std::string base = name.substr(0, colon);
  for (const char* known : {"random", "annealing", "evolution", "policy"}) {
    if (base != known) continue;
    if (colon == std::string::npos) return absl::OkStatus();
    if (base == "policy" && colon + 1 < name.size()) return absl::OkStatus();
    return absl::InvalidArgumentError("strategy: only policy takes a checkpoint name");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("strategy: unknown strategy '", name.substr(0, 32), "'"));
}

}  // namespace kiln::agent
