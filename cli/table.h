// Plain-text tables and the number/time formatting the command-line output shares.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cli {

using Row = std::vector<std::string>;

// Left-aligned columns separated by two spaces, header first, no trailing spaces. Widths count
// UTF-8 code points, so "µs" is two columns wide.
std::string FormatTable(const Row& header, const std::vector<Row>& rows);

// Display width of UTF-8 text in columns (one per code point).
size_t DisplayWidth(std::string_view text);

// Fixed notation with `digits` decimals ("812.5" for 812.5, 1). "-" for non-finite or <= 0
// when `dash_if_nonpositive`.
std::string FormatFixed(double value, int digits, bool dash_if_nonpositive = true);
// Microseconds with precision fitted to magnitude: "0.812", "81.25", "812.5", "16500".
std::string FormatMicros(double us);
// Seconds as "42s", "3m07s", "2h05m".
std::string FormatDuration(int64_t seconds);
// Local time "YYYY-MM-DD HH:MM:SS"; "-" for 0.
std::string FormatLocalTime(int64_t unix_ms);

}  // namespace kiln::cli
