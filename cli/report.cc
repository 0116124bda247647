#include "cli/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/format.h"
#include "cli/results.h"
#include "cli/table.h"
#include "cli/usage.h"
#include "codegen/workload.h"
#include "common/text.h"
#include "google/protobuf/util/json_util.h"

namespace kiln::cli {
namespace {

// Categorical colours (one per task), distinguishable and readable on white.
constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
std::string Colour(size_t i) { return kPalette[i % std::size(kPalette)]; }

// Messages and long figures are cut in the page: compiler errors run to pages.
constexpr size_t kMessageChars = 600;
// Beyond this many tasks the roofline legend names the first ones and counts the rest.
constexpr size_t kLegendTasks = 14;

// A coordinate in the SVG (one decimal is below a pixel).
std::string Px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

// A figure for a label: 4 significant digits, no exponent below a million.
std::string Figure(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-3))
    std::snprintf(buf, sizeof(buf), "%.3g", v);
  else
    std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

std::string UtcTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const time_t s = static_cast<time_t>(unix_ms / 1000);
  struct tm tm;
  gmtime_r(&s, &tm);
  char buf[40];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

bool Done(const v1::Trial& t) {
  return t.has_measurement() && t.measurement().status() != v1::STATUS_UNSPECIFIED;
}
bool Ok(const v1::Measurement& m) { return m.status() == v1::OK && IsUsable(m); }

// One plot axis: data range [lo, hi] mapped onto pixels [p0, p1] (p1 < p0 for y).
struct Axis {
  double lo = 1, hi = 10;
  bool log = false;
  double step = 1;  // linear ticks
  double p0 = 0, p1 = 1;

  double Map(double v) const {
    double t =
        log ? (std::log10(std::max(v, 1e-300)) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
            : (v - lo) / (hi - lo);
    return p0 + t * (p1 - p0);
  }
  std::vector<double> Ticks() const {
    std::vector<double> out;
    if (log) {
      const int d0 = static_cast<int>(std::floor(std::log10(lo) + 1e-9));
      const int d1 = static_cast<int>(std::ceil(std::log10(hi) - 1e-9));
      const bool fine = d1 - d0 <= 2;  // few decades: 2 and 5 as well
      for (int d = d0; d <= d1; ++d)
        for (double m : {1.0, 2.0, 5.0}) {
          if (m != 1 && !fine) continue;
          const double v = m * std::pow(10.0, d);
          if (v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9)) out.push_back(v);
        }
    } else {
      for (int i = 0; i <= 20; ++i) {
        const double v = lo + i * step;
        if (v > hi + step * 1e-6) break;
        out.push_back(std::fabs(v) < step * 1e-9 ? 0 : v);
      }
    }
    return out;
  }
};

// An axis covering [min, max] on round values: decades when `log`, else 1-2-5 steps.
Axis MakeAxis(double min, double max, bool log, double p0, double p1) {
  Axis a;
  a.log = log;
  a.p0 = p0;
  a.p1 = p1;
  if (!(min > 0) && log) min = max > 0 ? max / 10 : 1;
  if (!(max >= min)) max = min;
  if (log) {
    a.lo = std::pow(10.0, std::floor(std::log10(min)));
    a.hi = std::pow(10.0, std::ceil(std::log10(max)));
    if (a.hi <= a.lo) a.hi = a.lo * 10;
    return a;
  }
  if (max == min) {
    const double pad = min != 0 ? std::fabs(min) * 0.1 : 1;
    min -= pad;
    max += pad;
  }
  const double raw = (max - min) / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  a.step = mag * (raw / mag <= 1 ? 1 : raw / mag <= 2 ? 2 : raw / mag <= 5 ? 5 : 10);
  a.lo = std::floor(min / a.step) * a.step;
  a.hi = std::ceil(max / a.step) * a.step;
  if (a.hi <= a.lo) a.hi = a.lo + a.step;
  return a;
}

struct Box {
  double width, height, left, right, top, bottom;
  double x0() const { return left; }
  double x1() const { return width - right; }
  double y0() const { return height - bottom; }  // bottom edge of the plot area
  double y1() const { return top; }
};

std::string SvgOpen(const Box& b, const std::string& title) {
  return "<svg class=\"plot\" role=\"img\" width=\"" + Px(b.width) + "\" height=\"" + Px(b.height) +
         "\" viewBox=\"0 0 " + Px(b.width) + " " + Px(b.height) + "\"><title>" + HtmlEscape(title) +
         "</title>\n";
}

std::string Text(double x, double y, const std::string& text, const std::string& cls,
                 const char* anchor = "start", const std::string& extra = "") {
  return "<text class=\"" + cls + "\" x=\"" + Px(x) + "\" y=\"" + Px(y) + "\" text-anchor=\"" +
         anchor + "\"" + extra + ">" + HtmlEscape(text) + "</text>\n";
}

// Plot frame, grid, ticks with their figures and the two axis labels.
std::string Frame(const Box& b, const Axis& x, const Axis& y, const std::string& xlabel,
                  const std::string& ylabel) {
  std::string out = "<rect class=\"frame\" x=\"" + Px(b.x0()) + "\" y=\"" + Px(b.y1()) +
                    "\" width=\"" + Px(b.x1() - b.x0()) + "\" height=\"" + Px(b.y0() - b.y1()) +
                    "\"/>\n";
  for (double v : x.Ticks()) {
    const double px = x.Map(v);
    out += "<line class=\"grid\" x1=\"" + Px(px) + "\" y1=\"" + Px(b.y1()) + "\" x2=\"" + Px(px) +
           "\" y2=\"" + Px(b.y0()) + "\"/><line class=\"tick\" x1=\"" + Px(px) + "\" y1=\"" +
           Px(b.y0()) + "\" x2=\"" + Px(px) + "\" y2=\"" + Px(b.y0() + 5) + "\"/>\n";
    out += Text(px, b.y0() + 17, Figure(v), "ticklabel", "middle");
  }
  for (double v : y.Ticks()) {
    const double py = y.Map(v);
    out += "<line class=\"grid\" x1=\"" + Px(b.x0()) + "\" y1=\"" + Px(py) + "\" x2=\"" +
           Px(b.x1()) + "\" y2=\"" + Px(py) + "\"/><line class=\"tick\" x1=\"" + Px(b.x0() - 5) +
           "\" y1=\"" + Px(py) + "\" x2=\"" + Px(b.x0()) + "\" y2=\"" + Px(py) + "\"/>\n";
    out += Text(b.x0() - 8, py + 4, Figure(v), "ticklabel", "end");
  }
  out += Text((b.x0() + b.x1()) / 2, b.height - 8, xlabel, "axislabel", "middle");
  const double cy = (b.y0() + b.y1()) / 2;
  out +=
      Text(14, cy, ylabel, "axislabel", "middle", " transform=\"rotate(-90 14 " + Px(cy) + ")\"");
  return out;
}

std::string Circle(double x, double y, double r, const std::string& attrs) {
  return "<circle cx=\"" + Px(x) + "\" cy=\"" + Px(y) + "\" r=\"" + Px(r) + "\" " + attrs + "/>\n";
}

std::string Cross(double x, double y, double r, const std::string& attrs) {
  return "<path d=\"M" + Px(x - r) + " " + Px(y - r) + "L" + Px(x + r) + " " + Px(y + r) + "M" +
         Px(x - r) + " " + Px(y + r) + "L" + Px(x + r) + " " + Px(y - r) + "\" " + attrs + "/>\n";
}

std::string Diamond(double x, double y, double r, const std::string& attrs) {
  return "<path d=\"M" + Px(x) + " " + Px(y - r) + "L" + Px(x + r) + " " + Px(y) + "L" + Px(x) +
         " " + Px(y + r) + "L" + Px(x - r) + " " + Px(y) + "Z\" " + attrs + "/>\n";
}

std::string Square(double x, double y, double r, const std::string& attrs) {
  return "<rect x=\"" + Px(x - r) + "\" y=\"" + Px(y - r) + "\" width=\"" + Px(2 * r) +
         "\" height=\"" + Px(2 * r) + "\" " + attrs + "/>\n";
}

std::string Polyline(const std::vector<std::pair<double, double>>& points,
                     const std::string& attrs) {
  std::string out = "<polyline points=\"";
  for (size_t i = 0; i < points.size(); ++i)
    out += (i ? " " : "") + Px(points[i].first) + "," + Px(points[i].second);
  return out + "\" " + attrs + "/>\n";
}

std::string HLine(double x0, double x1, double y, const std::string& attrs) {
  return "<path d=\"M" + Px(x0) + " " + Px(y) + "H" + Px(x1) + "\" " + attrs + "/>\n";
}

bool SameConfig(const v1::Config& a, const v1::Config& b) {
  if (a.knobs_size() != b.knobs_size()) return false;
  for (const auto& [k, v] : a.knobs()) {
    auto it = b.knobs().find(k);
    if (it == b.knobs().end() || it->second != v) return false;
  }
  return true;
}

bool IsModelJob(const v1::Job& job) {
  return !job.spec().model().empty() || !job.spec().hf_config_json().empty();
}

// Trials of a kind for a task, done, in proposal order.
std::vector<const v1::Trial*> TaskTrials(const v1::GetResultsResponse& r, int task,
                                         v1::TrialKind kind) {
  std::vector<const v1::Trial*> out;
  for (const v1::Trial& t : r.trials())
    if (t.task_index() == task && t.kind() == kind && Done(t)) out.push_back(&t);
  std::stable_sort(out.begin(), out.end(),
                   [](const v1::Trial* a, const v1::Trial* b) { return a->seq() < b->seq(); });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Convergence: one plot per task.

std::string ConvergencePlot(const v1::GetResultsResponse& r, int task, const TaskSummary& s) {
  const Box b{540, 300, 66, 16, 40, 46};
  struct Point {
    double x, y;
    bool counted;  // part of the best so far (a demoted figure is not)
  };
  std::vector<Point> points;
  std::vector<double> failed_x;
  const std::vector<const v1::Trial*> tune = TaskTrials(r, task, v1::TUNE);
  const std::vector<const v1::Trial*> remeasured = TaskTrials(r, task, v1::REMEASURE);
  for (size_t i = 0; i < tune.size(); ++i) {
    const v1::Trial& t = *tune[i];
    const double x = static_cast<double>(i + 1);
    if (!Ok(t.measurement())) {
      failed_x.push_back(x);
      continue;
    }
    Point p{x, t.measurement().median_us(), true};
    if (t.measurement().raced_ahead()) {  // the full re-measurement is the figure that counts
      for (const v1::Trial* m : remeasured) {
        if (!SameConfig(m->config(), t.config())) continue;
        if (m->measurement().demoted() || !Ok(m->measurement()))
          p.counted = false;
        else
          p.y = m->measurement().median_us();
      }
    }
    points.push_back(p);
  }
  std::string out = SvgOpen(b, "convergence of " + s.workload);
  double lo = INFINITY, hi = 0;
  for (const Point& p : points) lo = std::min(lo, p.y), hi = std::max(hi, p.y);
  if (s.baseline)
    lo = std::min(lo, s.baseline->median_us()), hi = std::max(hi, s.baseline->median_us());
  if (s.best) lo = std::min(lo, s.best->median_us()), hi = std::max(hi, s.best->median_us());
  const double n = std::max<double>(tune.size(), 1);
  const Axis x = MakeAxis(0, std::max(n, 5.0), false, b.x0(), b.x1());
  if (hi <= 0) {
    out += Frame(b, x, MakeAxis(0, 1, false, b.y0(), b.y1()), "trial (in proposal order)",
                 "median (µs)");
    out +=
        Text((b.x0() + b.x1()) / 2, (b.y0() + b.y1()) / 2, "no measured trial", "note", "middle");
    return out + "</svg>\n";
  }
  const bool log = hi / lo > 6;
  const Axis y = log ? MakeAxis(lo, hi, true, b.y0(), b.y1())
                     : MakeAxis(std::max(0.0, lo - 0.1 * (hi - lo)), hi + 0.1 * (hi - lo), false,
                                b.y0(), b.y1());
  out += Frame(b, x, y, "trial (in proposal order)", log ? "median (µs, log)" : "median (µs)");
  // Legend row above the plot area.
  double lx = b.x0();
  const double ly = 16;
  out += Polyline({{lx, ly}, {lx + 18, ly}}, "class=\"best\"");
  out += Text(lx + 22, ly + 4, "best so far", "legend");
  lx += 100;
  out += Circle(lx + 4, ly, 3, "class=\"trial\"");
  out += Text(lx + 12, ly + 4, "trial", "legend");
  lx += 52;
  out += Cross(lx + 4, ly, 3.5, "class=\"refused\"");
  out += Text(lx + 12, ly + 4, "refused", "legend");
  lx += 70;
  if (s.best) {
    out += Diamond(lx + 4, ly, 5, "class=\"reported\"");
    out += Text(lx + 12, ly + 4, "reported best", "legend");
    lx += 104;
  }
  if (s.baseline) {
    out += HLine(lx, lx + 18, ly, "class=\"baseline\"");
    out += Text(lx + 22, ly + 4, "baseline", "legend");
  }
  if (s.baseline) {
    const double py = y.Map(s.baseline->median_us());
    out += HLine(b.x0(), b.x1(), py, "class=\"baseline\"");
    out += Text(b.x1() - 4, py - 5,
                s.baseline_name + " " + FormatMicros(s.baseline->median_us()) + " µs", "linelabel",
                "end");
  }
  std::vector<std::pair<double, double>> steps;
  double best = INFINITY;
  for (const Point& p : points) {
    out += Circle(x.Map(p.x), y.Map(p.y), 3, p.counted ? "class=\"trial\"" : "class=\"demoted\"");
    if (!p.counted || p.y >= best) continue;
    if (std::isfinite(best)) steps.push_back({x.Map(p.x), y.Map(best)});
    steps.push_back({x.Map(p.x), y.Map(p.y)});
    best = p.y;
  }
  if (!steps.empty()) {
    steps.push_back({x.Map(n), y.Map(best)});
    out += Polyline(steps, "class=\"best\"");
  }
  for (double fx : failed_x) out += Cross(x.Map(fx), b.y0() - 7, 3.5, "class=\"refused\"");
  if (s.best) out += Diamond(x.Map(n), y.Map(s.best->median_us()), 5, "class=\"reported\"");
  return out + "</svg>\n";
}

// ---------------------------------------------------------------------------------------------
// Roofline: every measured configuration of every task.

std::string RooflinePlot(const v1::GetResultsResponse& r, const std::vector<TaskSummary>& tasks,
                         const v1::ChipFingerprint* chip) {
  const Box b{860, 480, 72, 230, 20, 50};
  struct Dot {
    double ai, gflops;
    size_t task;
    int shape;  // 0 configuration, 1 task best, 2 baseline
  };
  std::vector<Dot> dots;
  auto add = [&](const v1::Measurement& m, size_t task, int shape) {
    if (Ok(m) && m.gflops() > 0 && m.gbytes_per_s() > 0)
      dots.push_back({m.gflops() / m.gbytes_per_s(), m.gflops(), task, shape});
  };
  for (const v1::Trial& t : r.trials())
    if (t.kind() == v1::TUNE && Done(t) && t.task_index() >= 0 &&
        static_cast<size_t>(t.task_index()) < tasks.size())
      add(t.measurement(), t.task_index(), 0);
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].baseline) add(*tasks[i].baseline, i, 2);
    if (tasks[i].best) add(*tasks[i].best, i, 1);
  }
  const double peak = chip ? chip->peak_gflops() : 0;
  const double bw = chip ? chip->read_gbytes_per_s() : 0;
  std::string out = SvgOpen(b, "roofline");
  if (dots.empty()) {
    out += Frame(b, MakeAxis(0.1, 10, true, b.x0(), b.x1()), MakeAxis(1, 100, true, b.y0(), b.y1()),
                 "arithmetic intensity (FLOP/byte)", "GFLOP/s");
    out += Text((b.x0() + b.x1()) / 2, (b.y0() + b.y1()) / 2,
                "no measurement with FLOP and byte counts", "note", "middle");
    return out + "</svg>\n";
  }
  double xlo = INFINITY, xhi = 0, ylo = INFINITY, yhi = 0;
  for (const Dot& d : dots) {
    xlo = std::min(xlo, d.ai), xhi = std::max(xhi, d.ai);
    ylo = std::min(ylo, d.gflops), yhi = std::max(yhi, d.gflops);
  }
  if (peak > 0) yhi = std::max(yhi, peak);
  if (peak > 0 && bw > 0) xhi = std::max(xhi, peak / bw);
  const Axis x = MakeAxis(xlo / 1.5, xhi * 1.5, true, b.x0(), b.x1());
  const Axis y = MakeAxis(ylo / 1.5, yhi * 1.5, true, b.y0(), b.y1());
  out += Frame(b, x, y, "arithmetic intensity (FLOP/byte, log)", "GFLOP/s (log)");
  // Roofs: bandwidth x intensity up to the ridge, then the compute peak.
  if (bw > 0) {
    const double ridge = peak > 0 ? peak / bw : x.hi;
    const double xs = std::max(x.lo, y.lo / bw);
    if (xs < ridge) {
      const double xe = std::min({ridge, x.hi, y.hi / bw});
      const double px0 = x.Map(xs), py0 = y.Map(bw * xs), px1 = x.Map(xe), py1 = y.Map(bw * xe);
      out += Polyline({{px0, py0}, {px1, py1}}, "class=\"roof\"");
      // The label runs along the line, above it, a little way in from its start.
      const double lx = px0 + 0.12 * (px1 - px0), ly = py0 + 0.12 * (py1 - py0) - 6;
      const double angle = std::atan2(py1 - py0, px1 - px0) * 180 / 3.14159265358979;
      out += Text(lx, ly, "read " + Figure(bw) + " GB/s", "linelabel", "start",
                  " transform=\"rotate(" + Px(angle) + " " + Px(lx) + " " + Px(ly) + ")\"");
    }
  }
  if (peak > 0) {
    const double xs = bw > 0 ? std::max(x.lo, peak / bw) : x.lo;
    out += HLine(x.Map(xs), b.x1(), y.Map(peak), "class=\"roof\"");
    out +=
        Text(b.x1() - 4, y.Map(peak) - 6, "peak " + Figure(peak) + " GFLOP/s", "linelabel", "end");
  }
  if (peak <= 0 || bw <= 0)
    out +=
        Text(b.x0() + 8, b.y1() + 16,
             "no measured peak or read bandwidth in the chip fingerprint: roofs not drawn", "note");
  for (int shape : {0, 2, 1})  // the task bests on top
    for (const Dot& d : dots) {
      if (d.shape != shape) continue;
      const std::string c = Colour(d.task);
      const double px = x.Map(d.ai), py = y.Map(d.gflops);
      if (shape == 0) out += Circle(px, py, 3.2, "class=\"cfg\" fill=\"" + c + "\"");
      if (shape == 1) out += Circle(px, py, 6.5, "class=\"taskbest\" stroke=\"" + c + "\"");
      if (shape == 2) out += Square(px, py, 4.5, "class=\"base\" stroke=\"" + c + "\"");
    }
  // Legend at the right: the tasks' colours, then what the marks mean.
  double ly = b.y1() + 10;
  const double lx = b.x1() + 16;
  for (size_t i = 0; i < tasks.size() && i < kLegendTasks; ++i, ly += 17) {
    out += Circle(lx + 5, ly, 4.5, "fill=\"" + Colour(i) + "\"");
    out += Text(lx + 15, ly + 4, CutUtf8(tasks[i].workload, 34), "legend");
  }
  if (tasks.size() > kLegendTasks) {
    out += Text(lx, ly + 4, "+" + std::to_string(tasks.size() - kLegendTasks) + " more tasks",
                "legend");
    ly += 17;
  }
  ly += 8;
  out += Circle(lx + 5, ly, 3.2, "class=\"cfg\" fill=\"#555\"");
  out += Text(lx + 15, ly + 4, "a measured configuration", "legend");
  ly += 17;
  out += Circle(lx + 5, ly, 6, "class=\"taskbest\" stroke=\"#555\"");
  out += Text(lx + 15, ly + 4, "the task's best", "legend");
  ly += 17;
  out += Square(lx + 5, ly, 4.5, "class=\"base\" stroke=\"#555\"");
  out += Text(lx + 15, ly + 4, "baseline", "legend");
  ly += 17;
  out += HLine(lx, lx + 12, ly, "class=\"roof\"");
  out += Text(lx + 15, ly + 4, "chip roofs (measured)", "legend");
  return out + "</svg>\n";
}

// ---------------------------------------------------------------------------------------------
// Model jobs: share of the step per operator, tokens/s against the bound.

// Horizontal bars, one per (label, value), scaled to the largest; `unit` follows each figure.
std::string BarChart(const std::string& title,
                     const std::vector<std::tuple<std::string, double, std::string>>& bars,
                     const std::string& axis_label) {
  const double row = 22;
  const Box b{860, 50 + row * bars.size() + 30, 280, 120, 14, 46};
  double max = 0;
  for (const auto& [label, value, text] : bars) max = std::max(max, value);
  const Axis x = MakeAxis(0, max > 0 ? max : 1, false, b.x0(), b.x1());
  std::string out = SvgOpen(b, title);
  out += "<rect class=\"frame\" x=\"" + Px(b.x0()) + "\" y=\"" + Px(b.y1()) + "\" width=\"" +
         Px(b.x1() - b.x0()) + "\" height=\"" + Px(b.y0() - b.y1()) + "\"/>\n";
  for (double v : x.Ticks()) {
    const double px = x.Map(v);
    out += "<line class=\"grid\" x1=\"" + Px(px) + "\" y1=\"" + Px(b.y1()) + "\" x2=\"" + Px(px) +
           "\" y2=\"" + Px(b.y0()) + "\"/>\n";
    out += Text(px, b.y0() + 17, Figure(v), "ticklabel", "middle");
  }
  out += Text((b.x0() + b.x1()) / 2, b.height - 8, axis_label, "axislabel", "middle");
  double top = b.y1() + 8;
  for (size_t i = 0; i < bars.size(); ++i, top += row) {
    const auto& [label, value, text] = bars[i];
    const double w = std::max(0.0, x.Map(value) - b.x0());
    out += "<rect class=\"bar\" x=\"" + Px(b.x0()) + "\" y=\"" + Px(top) + "\" width=\"" + Px(w) +
           "\" height=\"" + Px(row - 6) + "\" fill=\"" + Colour(i) + "\"/>\n";
    out += Text(b.x0() - 8, top + row / 2, CutUtf8(label, 44), "barlabel", "end");
    out += Text(b.x0() + w + 6, top + row / 2, text, "barvalue");
  }
  return out + "</svg>\n";
}

std::string ModelSection(const v1::Job& job, const std::vector<TaskSummary>& tasks) {
  std::string out = "<h2 id=\"model\">Model step</h2>\n";
  const v1::JobSpec& spec = job.spec();
  const std::string name = !spec.arch().name().empty() ? spec.arch().name() : spec.model();
  out += "<p>Model <b>" + HtmlEscape(name.empty() ? "(config.json)" : name) + "</b>, phase " +
         HtmlEscape(spec.phase().empty() ? "decode" : spec.phase()) + ", batch " +
         std::to_string(std::max(spec.batch(), 1)) +
         (spec.phase() == "prefill" ? ", prompt " + std::to_string(spec.prefill_tokens())
                                    : ", context " + std::to_string(spec.context())) +
         ", dtype " +
         HtmlEscape(
             codegen::DTypeName(spec.dtype() == v1::DTYPE_UNSPECIFIED ? v1::FP32 : spec.dtype())) +
         ".</p>\n";
  double step_us = 0;
  for (const TaskSummary& t : tasks) step_us += t.best ? t.count * t.best->median_us() : 0;
  std::vector<std::tuple<std::string, double, std::string>> share;
  for (const TaskSummary& t : tasks) {
    if (!t.best || step_us <= 0) continue;
    const double us = t.count * t.best->median_us();
    share.emplace_back(t.workload + " ×" + std::to_string(t.count), 100 * us / step_us,
                       FormatFixed(100 * us / step_us, 1) + "%  (" + FormatMicros(us) + " µs)");
  }
  std::stable_sort(share.begin(), share.end(),
                   [](const auto& a, const auto& b) { return std::get<1>(a) > std::get<1>(b); });
  out += "<h3>Share of the step per operator</h3>\n";
  if (share.empty())
    out += "<p class=\"note\">No task has a best yet.</p>\n";
  else
    out += "<p>count × best median of each task over their sum (" + FormatMicros(step_us) +
           " µs a step from per-operator timings).</p>\n" +
           BarChart("share of the step per operator", share, "share of the step (%)");
  const v1::StepResult& s = job.tokens_per_second();
  if (s.op_times_size() > 0 && s.step_us() > 0) {  // what the measured step itself spent
    std::vector<std::tuple<std::string, double, std::string>> measured;
    for (const v1::StepOpTime& o : s.op_times()) {
      const double us = o.in_step_us() * o.calls_per_step();
      measured.emplace_back(
          o.workload_key() + " ×" + std::to_string(o.calls_per_step()), 100 * us / s.step_us(),
          FormatFixed(100 * us / s.step_us(), 1) + "%  (" + FormatFixed(o.in_step_us(), 1) +
              " µs a call" +
              (o.isolated_us() > 0 ? ", alone " + FormatFixed(o.isolated_us(), 1) : "") + ")");
    }
    std::stable_sort(measured.begin(), measured.end(),
                     [](const auto& a, const auto& b) { return std::get<1>(a) > std::get<1>(b); });
    out +=
        "<h3>Inside the measured step</h3>\n<p>Each of Kiln's kernel calls timed as the step "
        "ran, over the measured step (" +
        FormatMicros(s.step_us()) + " µs), beside the kernel's median alone.</p>\n" +
        BarChart("share of the measured step per kernel", measured,
                 "share of the measured step (%)");
  }
  std::vector<std::tuple<std::string, double, std::string>> tps;
  auto add = [&](const std::string& label, double v) {
    if (v > 0) tps.emplace_back(label, v, FormatFixed(v, 2) + " tokens/s");
  };
  add("memory bound (" + FormatFixed(s.read_gbytes_per_s(), 1) + " GB/s read)", s.bound());
  add("Kiln, measured step", s.measured());
  add("Kiln, estimated from operators", s.estimated());
  add((s.baseline_name().empty() ? std::string("baseline") : s.baseline_name()) +
          (s.baseline_threads() > 0 ? " " + std::to_string(s.baseline_threads()) + "t" : ""),
      s.baseline_measured());
  out += "<h3>Tokens per second against the bound</h3>\n";
  if (tps.empty()) {
    out += "<p class=\"note\">No step was measured.</p>\n";
  } else {
    out += BarChart("tokens per second", tps, "tokens/s");
    std::string facts;
    if (s.bound() > 0 && s.measured() > 0)
      facts += "The measured step reaches " + FormatFixed(100 * s.bound_fraction(), 0) +
               "% of the memory bound" +
               (s.bytes_per_token() > 0
                    ? " (" + FormatFixed(s.bytes_per_token() / 1e9, 3) + " GB read a token)"
                    : "") +
               (s.baseline_bound_fraction() > 0
                    ? ", the baseline " + FormatFixed(100 * s.baseline_bound_fraction(), 0) + "%"
                    : "") +
               ". ";
    if (!s.note().empty()) facts += "Step: " + s.note() + ".";
    if (!facts.empty()) out += "<p>" + HtmlEscape(facts) + "</p>\n";
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Tables.

std::string Table(const std::vector<std::string>& header,
                  const std::vector<std::vector<std::string>>& rows, const char* cls = "") {
  std::string out = std::string("<table class=\"") + cls + "\"><thead><tr>";
  for (const std::string& h : header) out += "<th>" + HtmlEscape(h) + "</th>";
  out += "</tr></thead><tbody>\n";
  for (const auto& row : rows) {
    out += "<tr>";
    for (const std::string& cell : row) out += "<td>" + HtmlEscape(cell) + "</td>";
    out += "</tr>\n";
  }
  return out + "</tbody></table>\n";
}

std::string SummarySection(const v1::Job& job, const std::vector<TaskSummary>& tasks) {
  const bool model = IsModelJob(job);
  double step_us = 0;
  for (const TaskSummary& t : tasks) step_us += t.best ? t.count * t.best->median_us() : 0;
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const TaskSummary& t = tasks[i];
    const TaskCells c = CellsOf(t);
    rows.push_back(
        {t.workload, std::to_string(t.count),
         std::to_string(t.ok) + "/" + std::to_string(t.failed) + " of " + std::to_string(t.budget),
         c.best_us, c.gflops, c.gbytes_per_s, c.baseline, c.speedup,
         t.best ? ConfigText(t.best_config) : "-"});
    if (model)
      rows.back().push_back(t.best && step_us > 0
                                ? FormatFixed(100 * t.count * t.best->median_us() / step_us, 1) +
                                      "%"
                                : "-");
  }
  std::vector<std::string> header = {"workload",      "count",   "ok/failed",
                                     "best (µs)",     "GFLOP/s", "GB/s",
                                     "baseline (µs)", "speedup", "best config"};
  if (model) header.push_back("share");
  return "<h2 id=\"summary\">Summary</h2>\n" +
         (tasks.empty() ? std::string("<p class=\"note\">No tasks.</p>\n")
                        : Table(header, rows, "num"));
}

std::string RefusedSection(const std::vector<TaskSummary>& tasks) {
  std::string out = "<h2 id=\"refused\">Refused trials</h2>\n";
  std::vector<std::vector<std::string>> rows;
  size_t total = 0;
  for (const TaskSummary& t : tasks) {
    std::map<std::string, const RefusedTrial*> first;
    for (const RefusedTrial& r : t.refused) first.emplace(r.status, &r);
    for (const auto& [status, n] : t.refused_by_status) {
      const RefusedTrial* r = first[status];
      std::string config = r ? ConfigText(r->config) : "";
      std::string message = r ? r->message : "";
      rows.push_back({t.workload, status, std::to_string(n),
                      (config.empty() ? "" : "[" + config + "] ") +
                          (message.empty() ? "(no message)" : CutUtf8(message, kMessageChars))});
      total += n;
    }
  }
  if (rows.empty()) return out + "<p>No trial was refused.</p>\n";
  out += "<p>" + std::to_string(total) + (total == 1 ? " trial" : " trials") +
         " refused (failed to compile, wrong result, suspect timing, timeout, crash, or a "
         "new best its re-measurement did not confirm), by status, with the first message of "
         "each.</p>\n";
  return out + Table({"workload", "status", "trials", "first message"}, rows, "refused");
}

std::string ChipRows(const v1::ChipFingerprint& c) {
  std::string isa;
  for (const std::string& f : c.isa_features()) isa += (isa.empty() ? "" : " ") + f;
  auto bytes = [](int64_t b) {
    return b <= 0           ? std::string("-")
           : b >= (1 << 30) ? FormatFixed(b / double(1 << 30), 1) + " GiB"
           : b >= (1 << 20) ? FormatFixed(b / double(1 << 20), 1) + " MiB"
                            : FormatFixed(b / 1024.0, 0) + " KiB";
  };
  std::vector<std::vector<std::string>> rows = {
      {"chip type", c.chip_type()},
      {"kind / vendor / model", c.kind() + " / " + c.vendor() + " / " + c.model()},
      {"cores", std::to_string(c.cores())},
      {"L1d / L2 / L3",
       bytes(c.l1d_bytes()) + " / " + bytes(c.l2_bytes()) + " / " + bytes(c.l3_bytes())},
      {"memory", bytes(c.memory_bytes())},
      {"peak (measured)", FormatFixed(c.peak_gflops(), 1) + " GFLOP/s"},
      {"read bandwidth (measured)", FormatFixed(c.read_gbytes_per_s(), 1) + " GB/s"},
      {"ISA features", isa.empty() ? "-" : isa},
      {"compiler", c.compiler().empty() ? "-" : c.compiler()},
      {"host", c.hostname().empty() ? "-" : c.hostname()}};
  return Table({"field", "value"}, rows, "kv");
}

std::string ProvenanceSection(const v1::GetResultsResponse& r,
                              const std::vector<TaskSummary>& tasks,
                              const v1::ChipFingerprint* chip) {
  std::string out = "<h2 id=\"provenance\">Provenance</h2>\n";
  out += "<h3>Chip fingerprint</h3>\n";
  out += chip ? ChipRows(*chip)
              : "<p class=\"note\">The job carries no chip fingerprint (not bound to a worker "
                "yet).</p>\n";
  std::map<std::string, int> toolchains;
  for (const v1::Trial& t : r.trials())
    if (Done(t) && !t.toolchain().empty()) toolchains[t.toolchain()]++;
  out += "<h3>Toolchains</h3>\n";
  if (toolchains.empty()) {
    out += "<p class=\"note\">No trial reported its toolchain.</p>\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    for (const auto& [tc, n] : toolchains) rows.push_back({tc, std::to_string(n)});
    out += Table({"compiler and flags", "trials"}, rows);
  }
  out += "<h3>Best kernels</h3>\n";
  std::vector<std::vector<std::string>> rows;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const TaskSummary& s = tasks[i];
    if (!s.best) continue;
    const v1::Trial* found = nullptr;  // the trial that measured the best configuration
    for (const v1::Trial& t : r.trials())
      if (t.task_index() == static_cast<int>(i) && t.kind() != v1::BASELINE &&
          t.kind() != v1::STEP && SameConfig(t.config(), s.best_config) &&
          (!found || (found->source_hash().empty() && !t.source_hash().empty())))
        found = &t;
    rows.push_back({s.workload, ConfigText(s.best_config),
                    found && !found->source_hash().empty() ? found->source_hash() : "-",
                    found && !found->toolchain().empty() ? found->toolchain() : "-",
                    found && !found->worker_id().empty() ? found->worker_id() : "-"});
  }
  out += rows.empty()
             ? "<p class=\"note\">No best kernel yet.</p>\n"
             : Table({"workload", "config", "source hash", "toolchain", "worker"}, rows, "mono");
  out += "<h3>Job spec</h3>\n";
  v1::JobSpec spec = r.job().spec();
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  if (!google::protobuf::util::MessageToJsonString(spec, &json, options).ok())
    json = spec.ShortDebugString();
  out += "<pre>" + HtmlEscape(json) + "</pre>\n";
  out += "<p class=\"note\">Made by " + HtmlEscape(VersionText()) +
         " from the coordinator's GetResults answer.</p>\n";
  return out;
}

constexpr char kStyle[] =
    R"(body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:24px auto;max-width:1180px;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:3px;margin-top:28px}h3{font-size:15px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}th{background:#f4f4f4}
table.refused td:last-child{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-word;max-width:700px}
table.mono td{font-family:ui-monospace,monospace}table.kv td:first-child{font-weight:600}
pre{background:#f7f7f7;border:1px solid #ddd;padding:8px;overflow:auto;font-size:12px;max-height:420px}
.note{color:#777}figure{margin:0 6px 10px 0}figcaption{font-weight:600;margin:0 0 3px}.facts span{margin-right:18px}.plots{display:flex;flex-wrap:wrap;gap:8px}
svg.plot{background:#fff;border:1px solid #e3e3e3;font-family:system-ui,sans-serif}
.frame{fill:none;stroke:#888}.grid{stroke:#eee}.tick{stroke:#888}
.ticklabel{font-size:11px;fill:#444}.axislabel{font-size:12px;fill:#222}.legend{font-size:11.5px;fill:#222}
.linelabel{font-size:11px;fill:#555}svg .note{font-size:13px;fill:#888}.barlabel{font-size:11.5px;fill:#222;dominant-baseline:middle}
.barvalue{font-size:11px;fill:#444;dominant-baseline:middle}
.best{fill:none;stroke:#1f77b4;stroke-width:2}.trial{fill:#1f77b4;fill-opacity:.45}.demoted{fill:none;stroke:#1f77b4}
.refused{stroke:#d62728;stroke-width:1.6;fill:none}.reported{fill:#2ca02c;stroke:#145214}
.baseline{stroke:#444;stroke-width:1.5;stroke-dasharray:6 4;fill:none}
.roof{stroke:#222;stroke-width:2;fill:none}.cfg{fill-opacity:.55}.taskbest{fill:none;stroke-width:2.2}.base{fill:#fff;stroke-width:2}
)";

}  // namespace

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '\t':
      case '\n':
        out += c;
        break;
      default:
        if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) out += c;
    }
  }
  return out;
}

std::string ReportHtml(const v1::GetResultsResponse& results, const v1::ChipFingerprint* chip) {
  const v1::Job& job = results.job();
  if (job.has_chip() && (job.chip().peak_gflops() > 0 || !job.chip().chip_type().empty()))
    chip = &job.chip();
  const std::vector<TaskSummary> tasks = SummarizeTasks(results);
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
      // Nothing may be fetched when the page is viewed: no script, no remote style or image.
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
      "'unsafe-inline'\">\n<title>Kiln report " +
      HtmlEscape(job.id()) + "</title>\n<style>" + kStyle + "</style></head>\n<body>\n";
  out +=
      "<h1>Kiln job " + HtmlEscape(job.id()) + ": " + HtmlEscape(JobWorkloadText(job)) + "</h1>\n";
  out += "<p class=\"facts\"><span>state <b>" + HtmlEscape(v1::JobState_Name(job.state())) +
         "</b></span><span>chip <b>" + HtmlEscape(job.chip_type().empty() ? "-" : job.chip_type()) +
         "</b></span><span>trials " + std::to_string(job.trials_done()) + " done, " +
         std::to_string(job.trials_failed()) + " failed, budget " +
         std::to_string(job.spec().budget_trials()) + "</span><span>created " +
         UtcTime(job.created_unix_ms()) + "</span><span>finished " +
         UtcTime(job.finished_unix_ms()) + "</span></p>\n";
  if (!job.message().empty())
    out += "<p class=\"message\">" + HtmlEscape(CutUtf8(job.message(), kMessageChars)) + "</p>\n";
  out +=
      "<p><a href=\"#summary\">Summary</a> · <a href=\"#convergence\">Convergence</a> · <a "
      "href=\"#roofline\">Roofline</a> · " +
      std::string(IsModelJob(job) ? "<a href=\"#model\">Model step</a> · " : "") +
      "<a href=\"#refused\">Refused trials</a> · <a href=\"#provenance\">Provenance</a></p>\n";
  out += SummarySection(job, tasks);
  out +=
      "<h2 id=\"convergence\">Convergence</h2>\n<p>The fastest median found so far against "
      "the number of tuning trials, per task; dots are the trials' medians, crosses the refused "
      "trials, the dashed line the baseline, the diamond the reported best (after "
      "re-measurement and final rounds).</p>\n<div class=\"plots\">\n";
  for (size_t i = 0; i < tasks.size(); ++i)
    out += "<figure><figcaption>" + HtmlEscape(tasks[i].workload) +
           (tasks[i].count > 1 ? " ×" + std::to_string(tasks[i].count) : "") + "</figcaption>\n" +
           ConvergencePlot(results, static_cast<int>(i), tasks[i]) + "</figure>\n";
  out +=
      "</div>\n<h2 id=\"roofline\">Roofline</h2>\n<p>Every measured configuration: GFLOP/s "
      "against arithmetic intensity (FLOP per byte moved), log-log. The roofs are the chip's "
      "measured read bandwidth and peak from its fingerprint.</p>\n";
  out += RooflinePlot(results, tasks, chip);
  if (IsModelJob(job)) out += ModelSection(job, tasks);
  out += RefusedSection(tasks);
  out += ProvenanceSection(results, tasks, chip);
  return out + "</body></html>\n";
}

absl::Status WriteReportFile(const std::string& html, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return absl::InvalidArgumentError("--out: expected a file name");
  const fs::path target(path);
  const fs::path tmp =
      target.parent_path() / absl::StrCat(".", target.filename().string(), ".tmp-", getpid());
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    if (!file)
      return absl::UnavailableError(absl::StrCat("--out ", path, ": cannot write ", tmp.string()));
    file.write(html.data(), static_cast<std::streamsize>(html.size()));
    file.close();
    if (!file) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return absl::UnavailableError(absl::StrCat("--out ", path, ": cannot write ", tmp.string()));
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(tmp, ec);
    return absl::UnavailableError(absl::StrCat("--out ", path, ": cannot write: ", why));
  }
  return absl::OkStatus();
}

std::string DefaultReportPath(const std::string& job_id) {
  return "kiln-report-" + job_id + ".html";
}

}  // namespace kiln::cli
