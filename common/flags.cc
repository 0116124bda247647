#include "common/flags.h"

#include <algorithm>
#include <cstdlib>

namespace kiln {

std::optional<FlagError> ParseFlags(const std::vector<std::string>& args,
                                    const std::vector<Flag>& flags,
                                    std::vector<std::string>* positional) {
  auto find = [&](const std::string& name) -> const Flag* {
    auto it =
        std::find_if(flags.begin(), flags.end(), [&](const Flag& f) { return f.name == name; });
    return it == flags.end() ? nullptr : &*it;
  };
  auto dashes = [](const std::string& s) { return s.rfind("--", 0) == 0; };
  const bool has_lists =
      std::any_of(flags.begin(), flags.end(), [](const Flag& f) { return f.kind == Flag::kList; });
  const Flag* list = nullptr;  // the list flag that stray arguments belong to
  std::vector<const Flag*> seen;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const size_t eq = dashes(arg) ? arg.find('=') : std::string::npos;  // --name=value
    const std::string name = arg.substr(0, eq);
    const Flag* flag = find(name);
    if (!flag) {
      if (dashes(arg)) return FlagError{"unknown flag " + name};
      if (list) {
        if (std::string why = list->set(arg); !why.empty()) return FlagError{why, true};
        continue;
      }
      if (positional && (arg.size() < 2 || arg[0] != '-')) {
        positional->push_back(arg);
        continue;
      }
      return FlagError{(has_lists ? "unexpected argument " : "unknown flag ") + arg};
    }
    std::string value;
    if (eq != std::string::npos) {
      if (flag->kind == Flag::kSwitch) return FlagError{name + " takes no value"};
      value = arg.substr(eq + 1);
    } else if (flag->kind == Flag::kValue) {
      if (i + 1 >= args.size() || (dashes(args[i + 1]) && find(args[i + 1])))
        return FlagError{name + " needs a value"};
      value = args[++i];
    }
    if (!flag->repeatable && std::count(seen.begin(), seen.end(), flag))
      return FlagError{name + " given more than once"};
    seen.push_back(flag);
    list = flag->kind == Flag::kList ? flag : nullptr;
    if (flag->kind == Flag::kList && eq == std::string::npos) continue;  // the items follow
    if (std::string why = flag->set(value); !why.empty()) return FlagError{why, true};
    if (flag->stop) break;
  }
  return std::nullopt;
}

std::optional<FlagError> ParseFlags(int argc, char** argv, const std::vector<Flag>& flags,
                                    std::vector<std::string>* positional) {
  return ParseFlags(std::vector<std::string>(argv + std::min(argc, 1), argv + argc), flags,
                    positional);
}

std::function<std::string(const std::string&)> StoreText(std::string* dst) {
  return [dst](const std::string& v) {
    *dst = v;
    return std::string();
  };
}

std::function<std::string(const std::string&)> StoreBool(bool* dst, bool value) {
  return [dst, value](const std::string&) {
    *dst = value;
    return std::string();
  };
}

std::function<std::string(const std::string&)> StoreInt(const char* flag, long lo, long hi,
                                                        int* dst) {
  return [=](const std::string& v) {
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < lo || n > hi)
      return std::string(flag) + " must be a whole number in " + std::to_string(lo) + ".." +
             std::to_string(hi) + ", got '" + v.substr(0, 32) + "'";
    *dst = static_cast<int>(n);
    return std::string();
  };
}

}  // namespace kiln
