#include "bench/flags.h"

#include <algorithm>

namespace kiln::bench {

std::optional<FlagError> ParseFlags(int argc, char** argv, const std::vector<Flag>& flags) {
  const bool has_lists =
      std::any_of(flags.begin(), flags.end(), [](const Flag& f) { return f.kind == Flag::kList; });
  const Flag* list = nullptr;  // the list flag that stray arguments belong to
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto flag =
        std::find_if(flags.begin(), flags.end(), [&](const Flag& f) { return f.name == arg; });
    if (flag == flags.end()) {
      if (arg.rfind("--", 0) == 0 || !has_lists) return FlagError{"unknown flag " + arg};
      if (!list) return FlagError{"unexpected argument " + arg};
      if (std::string why = list->set(arg); !why.empty()) return FlagError{why, true};
      continue;
    }
    list = flag->kind == Flag::kList ? &*flag : nullptr;
    if (flag->kind == Flag::kList) continue;
    std::string value;
    if (flag->kind == Flag::kValue) {
      if (i + 1 >= argc) return FlagError{arg + " needs a value"};
      value = argv[++i];
    }
    if (std::string why = flag->set(value); !why.empty()) return FlagError{why, true};
    if (flag->stop) break;
  }
  return std::nullopt;
}

}  // namespace kiln::bench
