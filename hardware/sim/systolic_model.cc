#include "hardware/sim/systolic_model.h"

#include <algorithm>
#include <array>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kiln::hardware {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Loop orders, outermost first, as indices into (m, n, k).
constexpr std::array<std::array<int, 3>, 6> kOrders = {
    {{0, 1, 2}, {1, 0, 2}, {0, 2, 1}, {2, 0, 1}, {1, 2, 0}, {2, 1, 0}}};

}  // namespace

std::string SystolicArray::Name() const {
  const SystolicArray d;
  std::string name = absl::StrCat("systolic-", rows, "x", cols);
  if (sram_bytes != d.sram_bytes) absl::StrAppend(&name, "-", sram_bytes >> 10, "kb");
  if (bandwidth_gbs != d.bandwidth_gbs) absl::StrAppend(&name, "-", bandwidth_gbs, "gbs");
  if (clock_mhz != d.clock_mhz) absl::StrAppend(&name, "-", clock_mhz, "mhz");
  return name;
}

absl::StatusOr<SystolicArray> ParseSystolicName(absl::string_view name) {
  SystolicArray a;
  std::vector<std::string> parts = absl::StrSplit(name, '-');
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("sim device '", name, "': ", why,
                     " (expected systolic-RxC[-<S>kb][-<B>gbs][-<F>mhz], e.g. systolic-128x128)"));
  };
  if (parts.size() < 2 || parts[0] != "systolic") return bad("unknown simulator");
  std::vector<std::string> rc = absl::StrSplit(parts[1], 'x');
  if (rc.size() != 2 || !absl::SimpleAtoi(rc[0], &a.rows) || !absl::SimpleAtoi(rc[1], &a.cols) ||
      a.rows < 1 || a.cols < 1 || a.rows > 4096 || a.cols > 4096)
    return bad(absl::StrCat("'", parts[1], "' is not an array size RxC in 1..4096"));
  for (size_t i = 2; i < parts.size(); ++i) {
    absl::string_view p = parts[i];
    double v = 0;
    if (absl::ConsumeSuffix(&p, "kb") && absl::SimpleAtod(p, &v) && v >= 1 && v <= (1 << 22)) {
      a.sram_bytes = static_cast<int64_t>(v) << 10;
    } else if (absl::ConsumeSuffix(&p, "gbs") && absl::SimpleAtod(p, &v) && v > 0 && v <= 1e5) {
      a.bandwidth_gbs = v;
    } else if (absl::ConsumeSuffix(&p, "mhz") && absl::SimpleAtod(p, &v) && v > 0 && v <= 1e5) {
      a.clock_mhz = v;
    } else {
      return bad(absl::StrCat("'", parts[i], "' is not <S>kb, <B>gbs or <F>mhz"));
    }
  }
  return a;
}

absl::StatusOr<GemmMapping> GemmMapping::FromConfig(const codegen::Config& c) {
  GemmMapping m;
  for (const char* k : {"DATAFLOW", "TM", "TN", "TK", "ORDER", "DB"})
    if (!c.count(k)) return absl::InvalidArgumentError(absl::StrCat("sim mapping lacks ", k));
  m.dataflow = static_cast<int>(c.at("DATAFLOW"));
  m.tm = c.at("TM");
  m.tn = c.at("TN");
  m.tk = c.at("TK");
  m.order = static_cast<int>(c.at("ORDER"));
  m.double_buffer = c.at("DB") != 0;
  if (m.dataflow < 0 || m.dataflow > 2 || m.order < 0 || m.order > 5 || m.tm < 1 || m.tn < 1 ||
      m.tk < 1)
    return absl::InvalidArgumentError("sim mapping out of range");
  return m;
}

SimResult SimulateGemm(const SystolicArray& array, int64_t M, int64_t N, int64_t K,
                       const GemmMapping& map, int b_bytes, const TileVisitor& on_tile) {
  const int64_t R = array.rows, C = array.cols;
  const double bytes_per_cycle = array.bandwidth_gbs * 1e3 / array.clock_mhz;
  const int64_t count[3] = {CeilDiv(M, map.tm), CeilDiv(N, map.tn), CeilDiv(K, map.tk)};
  const auto& order = kOrders[map.order];
  SimResult r;
  int64_t a_tile = -1, b_tile = -1, c_tile = -1, c_rows = 0, c_cols = 0;
  bool first = true;
  int64_t idx[3];
  for (int64_t i0 = 0; i0 < count[order[0]]; ++i0)
    for (int64_t i1 = 0; i1 < count[order[1]]; ++i1)
      for (int64_t i2 = 0; i2 < count[order[2]]; ++i2) {
        idx[order[0]] = i0, idx[order[1]] = i1, idx[order[2]] = i2;
        const int64_t mi = idx[0], ni = idx[1], ki = idx[2];
        const int64_t tm = std::min(map.tm, M - mi * map.tm),
                      tn = std::min(map.tn, N - ni * map.tn),
                      tk = std::min(map.tk, K - ki * map.tk);
        if (on_tile) on_tile(mi * map.tm, ni * map.tn, ki * map.tk, tm, tn, tk);
        double bytes = 0;
        if (mi * count[2] + ki != a_tile) bytes += 4.0 * tm * tk, a_tile = mi * count[2] + ki;
        if (ki * count[1] + ni != b_tile)
          bytes += 1.0 * b_bytes * tk * tn, b_tile = ki * count[1] + ni;
        if (mi * count[1] + ni != c_tile) {
          if (c_tile >= 0) bytes += 4.0 * c_rows * c_cols;  // write the previous C tile back
          if (ki > 0) bytes += 4.0 * tm * tn;               // partial sums come back
          c_tile = mi * count[1] + ni, c_rows = tm, c_cols = tn;
        }
        int64_t sr = tm, sc = tn, t = tk;  // output-stationary
        if (map.dataflow == 1) sr = tk, sc = tn, t = tm;
        if (map.dataflow == 2) sr = tk, sc = tm, t = tn;
        const double compute = 1.0 * CeilDiv(sr, R) * CeilDiv(sc, C) * (2 * R + C + t - 2);
        const double transfer = bytes / bytes_per_cycle;
        const double step =
            (map.double_buffer && !first) ? std::max(compute, transfer) : compute + transfer;
        r.cycles += step;
        r.compute_cycles += compute;
        r.stall_cycles += step - compute;
        r.dram_bytes += bytes;
        first = false;
      }
  const double last = 4.0 * c_rows * c_cols;
  r.cycles += last / bytes_per_cycle;
  r.stall_cycles += last / bytes_per_cycle;
  r.dram_bytes += last;
  r.utilization = r.cycles > 0 ? 1.0 * M * N * K / (r.cycles * R * C) : 0;
  return r;
}

std::vector<GemmTile> GemmTiles(const SystolicArray& array, int64_t M, int64_t N, int64_t K,
                                const GemmMapping& mapping) {
  std::vector<GemmTile> tiles;
  SimulateGemm(array, M, N, K, mapping, 4,
               [&](int64_t m0, int64_t n0, int64_t k0, int64_t tm, int64_t tn, int64_t tk) {
                 tiles.push_back({m0, n0, k0, tm, tn, tk});
               });
  return tiles;
}

std::string CheckTileCoverage(int64_t M, int64_t N, int64_t K, const std::vector<GemmTile>& tiles) {
  for (const GemmTile& t : tiles)
    if (t.m0 < 0 || t.n0 < 0 || t.k0 < 0 || t.tm <= 0 || t.tn <= 0 || t.tk <= 0 ||
        t.m0 + t.tm > M || t.n0 + t.tn > N || t.k0 + t.tk > K)
      return absl::StrCat("tile at (", t.m0, ", ", t.n0, ", ", t.k0, ") of ", t.tm, "x", t.tn, "x",
                          t.tk, " leaves the ", M, "x", N, "x", K, " problem");
  // The blocks: the distinct M and N extents must cut [0, M) and [0, N) into consecutive pieces.
  auto cut = [&](int64_t GemmTile::*start, int64_t GemmTile::*extent, int64_t total,
                 const char* dim, std::map<int64_t, size_t>* index) -> std::string {
    std::map<int64_t, int64_t> pieces;
    for (const GemmTile& t : tiles) {
      auto [it, fresh] = pieces.emplace(t.*start, t.*extent);
      if (!fresh && it->second != t.*extent)
        return absl::StrCat("two tiles start at ", dim, "=", t.*start, " with extents ", it->second,
                            " and ", t.*extent);
    }
    int64_t next = 0;
    for (const auto& [from, size] : pieces) {
      if (from != next)
        return absl::StrCat(dim, " ", std::min(from, next), "..", std::max(from, next), " is ",
                            from > next ? "never covered" : "covered twice");
      index->emplace(from, index->size());
      next = from + size;
    }
    if (next != total) return absl::StrCat(dim, " ", next, "..", total, " is never covered");
    return "";
  };
  std::map<int64_t, size_t> row, col;
  if (auto e = cut(&GemmTile::m0, &GemmTile::tm, M, "M", &row); !e.empty()) return e;
  if (auto e = cut(&GemmTile::n0, &GemmTile::tn, N, "N", &col); !e.empty()) return e;
  std::vector<int64_t> done(row.size() * col.size(), 0);  // each block's K covered so far
  for (const GemmTile& t : tiles) {
    int64_t& k = done[row[t.m0] * col.size() + col[t.n0]];
    if (t.k0 != k)
      return absl::StrCat("the block at (", t.m0, ", ", t.n0, ") gets K slice ", t.k0, "..",
                          t.k0 + t.tk, " after covering 0..", k,
                          t.k0 < k ? " (a slice twice)" : " (a slice skipped or out of order)");
    k += t.tk;
  }
  for (const auto& [m0, ri] : row)
    for (const auto& [n0, ci] : col)
      if (done[ri * col.size() + ci] != K)
        return absl::StrCat("the block at (", m0, ", ", n0, ") covers K only up to ",
                            done[ri * col.size() + ci], " of ", K);
  return "";
}

}  // namespace kiln::hardware
