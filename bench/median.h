// The median of a benchmark's samples (the mean of the middle two for an even count).
#pragma once

#include <algorithm>
#include <vector>

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}
