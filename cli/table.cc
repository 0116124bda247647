#include "cli/table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace kiln::cli {

size_t DisplayWidth(std::string_view text) {
  size_t width = 0;
  for (unsigned char c : text)
    if ((c & 0xC0) != 0x80) ++width;  // count lead bytes, skip UTF-8 continuation bytes
  return width;
}

std::string FormatTable(const Row& header, const std::vector<Row>& rows) {
  std::vector<size_t> widths(header.size(), 0);
  auto measure = [&](const Row& row) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (i >= widths.size()) widths.push_back(0);
      widths[i] = std::max(widths[i], DisplayWidth(row[i]));
    }
  };
  measure(header);
  for (const Row& row : rows) measure(row);
  std::string out;
  auto emit = [&](const Row& row) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - DisplayWidth(row[i]) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  emit(header);
  for (const Row& row : rows) emit(row);
  return out;
}

std::string FormatFixed(double value, int digits, bool dash_if_nonpositive) {
  if (!std::isfinite(value) || (dash_if_nonpositive && value <= 0)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, value);
  return buf;
}

std::string FormatMicros(double us) {
  if (!std::isfinite(us) || us <= 0) return "-";
  int digits = us < 1 ? 3 : us < 100 ? 2 : us < 10000 ? 1 : 0;
  return FormatFixed(us, digits);
}

std::string FormatDuration(int64_t seconds) {
  if (seconds < 0) seconds = 0;
  char buf[32];
  if (seconds < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(seconds));
  } else if (seconds < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(seconds / 60),
                  static_cast<long long>(seconds % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(seconds / 3600),
                  static_cast<long long>(seconds / 60 % 60));
  }
  return buf;
}

std::string FormatLocalTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

}  // namespace kiln::cli
