// The median of a sample (the mean of the two middle values for an even count; 0 when empty),
// shared by the benchmarks.
#pragma once

#include <algorithm>
#include <vector>

namespace kiln::bench {

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace kiln::bench
