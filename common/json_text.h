// One-line JSON text of an nlohmann::ordered_json value, for --json outputs and manifests.
#pragma once

#include <cmath>
#include <string>

#include "nlohmann/json.hpp"

namespace kiln {

// Compact (no newline, so line-reading consumers take it whole), keys in insertion order,
// non-finite numbers as null (nlohmann's rule), UTF-8 kept as is. Bytes that are not valid
// UTF-8 (a worker's compiler output cut mid-character, say) become U+FFFD instead of throwing.
inline std::string JsonText(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false,
                    nlohmann::ordered_json::error_handler_t::replace);
}

// `value` rounded to `decimals` places, for figures whose noise makes further digits meaningless
// (the text then reads "12.35", not "12.349999999999999"). Non-finite values stay so (null).
inline double RoundTo(double value, int decimals) {
  const double scale = std::pow(10.0, decimals);
  if (!std::isfinite(value) || std::fabs(value * scale) >= 0x1p52) return value;
  return std::round(value * scale) / scale;
}

}  // namespace kiln
