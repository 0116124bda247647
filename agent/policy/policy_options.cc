// KILN_POLICY_OPTIONS overrides: one table row per PolicyOptions member that experiments may set.
#include <cmath>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "agent/policy/policy_strategy.h"
#include "common/status.h"

namespace kiln::agent {
namespace {

template <typename E>
struct EnumName {
  absl::string_view name;
  E value;
};
constexpr EnumName<Surrogate> kSurrogateNames[] = {
    {"ensemble", Surrogate::kEnsemble}, {"gp", Surrogate::kGp}, {"blend", Surrogate::kBlend}};
constexpr EnumName<PriorMean> kPriorMeanNames[] = {
    {"none", PriorMean::kNone},
    {"cost_model", PriorMean::kCostModel},
    {"cost_model_and_policy", PriorMean::kCostModelAndPolicy}};
absl::Span<const EnumName<Surrogate>> NamesOf(Surrogate) { return kSurrogateNames; }
absl::Span<const EnumName<PriorMean>> NamesOf(PriorMean) { return kPriorMeanNames; }

// One override: its key, the member it sets and, for numbers, the range it accepts.
struct OptionSpec {
  absl::string_view key;
  std::variant<int PolicyOptions::*, double PolicyOptions::*, bool PolicyOptions::*,
               Surrogate PolicyOptions::*, PriorMean PolicyOptions::*>
      member;
  double min = 0, max = 0;
};
constexpr double kMany = 1e6;  // a bound on counts that no search comes near
const OptionSpec kOptionSpecs[] = {
    {"initial", &PolicyOptions::initial, 0, kMany},
    {"initial_warm", &PolicyOptions::initial_warm, 0, kMany},
    {"pool_policy", &PolicyOptions::pool_policy, 0, kMany},
    {"pool_uniform", &PolicyOptions::pool_uniform, 0, kMany},
    {"neighbours_of", &PolicyOptions::neighbours_of, 0, kMany},
    {"explore", &PolicyOptions::explore, 0, 1},
    {"local", &PolicyOptions::local, 0, 1},
    {"local_adapt", &PolicyOptions::local_adapt, 0, kMany},
    {"kappa", &PolicyOptions::kappa, 0, 100},
    {"crowd", &PolicyOptions::crowd, 0, 100},
    {"crowd_after", &PolicyOptions::crowd_after, 0, kMany},
    {"fail_penalty", &PolicyOptions::fail_penalty, 0, 100},
    {"gp", &PolicyOptions::surrogate},
    {"gp_kappa", &PolicyOptions::gp_kappa, 0, 100},
    {"gp_rows", &PolicyOptions::gp_rows, 1, kMany},
    {"gp_tune_every", &PolicyOptions::gp_tune_every, 0, kMany},
    {"gp_prior", &PolicyOptions::gp_prior, 0, 100},
    {"flip_max", &PolicyOptions::flip_max, 0, kMany},
    {"flip_cap", &PolicyOptions::flip_cap, 0, kMany},
    {"cost_steps", &PolicyOptions::cost_steps, 0, kMany},
    {"cost_steps_early", &PolicyOptions::cost_steps_early, 0, kMany},
    {"ppo_epochs", &PolicyOptions::ppo_epochs, 0, kMany},
    {"ppo_window", &PolicyOptions::ppo_window, 1, kMany},
    {"trust_after", &PolicyOptions::trust_after, 0, kMany},
    {"trust_min", &PolicyOptions::trust_min, 0, 1},
    {"trust_refill", &PolicyOptions::trust_refill, 0, kMany},
    {"prior_mean", &PolicyOptions::prior_mean},
    {"prior_ridge", &PolicyOptions::prior_ridge, 0, kMany},
    {"prior_fit", &PolicyOptions::prior_fit},
    {"prior_fit_min", &PolicyOptions::prior_fit_min, 0, kMany},
    {"prior_fit_corr", &PolicyOptions::prior_fit_corr, -1, 1},
    {"prior_clip", &PolicyOptions::prior_clip, 0, 1},
};

absl::Status BadValue(const OptionSpec& spec, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("policy option ", spec.key, ": '", value.substr(0, 24), "' is not ", want));
}

absl::Status SetOption(const OptionSpec& spec, absl::string_view value, PolicyOptions* o) {
  auto number = [&](double* v) {
    return absl::SimpleAtod(value, v) && *v >= spec.min && *v <= spec.max;
  };
  auto range = [&](absl::string_view kind) {
    return absl::StrCat(kind, " in [", spec.min, ", ", spec.max, "]");
  };
  return std::visit(
      [&](auto member) -> absl::Status {
        using T = std::remove_reference_t<decltype(o->*member)>;
        double v;
        if constexpr (std::is_same_v<T, int>) {
          if (!number(&v) || v != std::floor(v)) return BadValue(spec, value, range("an integer"));
          o->*member = static_cast<int>(v);
        } else if constexpr (std::is_same_v<T, double>) {
          if (!number(&v)) return BadValue(spec, value, range("a number"));
          o->*member = v;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!absl::SimpleAtob(value, &(o->*member))) return BadValue(spec, value, "0 or 1");
        } else {  // an enum: by name, or by the number it had when it was an int
          std::vector<std::string> names;
          for (const auto& e : NamesOf(T{})) {
            if (value == e.name || value == absl::StrCat(static_cast<int>(e.value))) {
              o->*member = e.value;
              return absl::OkStatus();
            }
            names.push_back(std::string(e.name));
          }
          return BadValue(spec, value, absl::StrCat("one of ", absl::StrJoin(names, ", ")));
        }
        return absl::OkStatus();
      },
      spec.member);
}

}  // namespace

absl::Status ParsePolicyOptions(const std::string& text, PolicyOptions* o) {
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& s : kOptionSpecs)
      if (s.key == kv.first) spec = &s;
    if (!spec)
      return absl::InvalidArgumentError(
          absl::StrCat("unknown policy option ", kv.first.substr(0, 32)));
    RETURN_IF_ERROR(SetOption(*spec, kv.second, o));
  }
  return absl::OkStatus();
}

}  // namespace kiln::agent
