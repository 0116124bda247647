#include "agent/space_index.h"

#include <algorithm>
#include <cmath>

namespace kiln::agent {
namespace {

// Spaces too large to enumerate up front are sampled by rejection, unless so few of their points
// are valid that rejection would fail (a GEMM space for small N and K, where most cache-block
// sizes are oversized): those are enumerated if their Cartesian product is at most this.
constexpr long double kSparseEnumerateLimit = 1 << 24;

}  // namespace

bool SpaceIndex::IsSparse() {
  std::mt19937_64 rng(0x5eed);
  Row r(sizes_.size());
  int valid = 0;
  constexpr int kProbes = 4096;
  for (int i = 0; i < kProbes; ++i) {
    for (size_t k = 0; k < sizes_.size(); ++k)
      r[k] = std::uniform_int_distribution<int>(0, sizes_[k] - 1)(rng);
    if (space_.SatisfiesConstraints(ToConfig(r))) {
      ++valid;
      seeds_.push_back(r);
    }
  }
  return valid < kProbes / 256;  // under ~0.4% valid
}

void SpaceIndex::FindSeed() {
  const auto& knobs = space_.knobs();
  if (knobs.empty()) return;
  Row r(knobs.size(), 0);  // the first valid point in mixed-radix order (first knob fastest),
  for (uint64_t n = 0; n < kSparseEnumerateLimit; ++n) {  // looked for as far as enumeration goes
    if (IsValid(r)) {
      seeds_.push_back(r);
      return;
    }
    size_t k = 0;
    for (; k < knobs.size() && ++r[k] == sizes_[k]; ++k) r[k] = 0;
    if (k == knobs.size()) return;  // no valid point at all
  }
}

void SpaceIndex::EnumerateAll() {
  enumerated_ = true;
  const auto& knobs = space_.knobs();
  if (knobs.empty()) return;
  // Mixed-radix walk (first knob fastest), updating one config in place.
  Row r(knobs.size(), 0);
  codegen::Config c = ToConfig(r);
  std::vector<int64_t*> slot;
  for (const auto& k : knobs) slot.push_back(&c[k.name]);
  while (true) {
    if (space_.SatisfiesConstraints(c)) {
      by_code_.emplace(Code(r), rows_.size());
      rows_.push_back(r);
    }
    size_t k = 0;
    for (; k < knobs.size(); ++k) {
      if (++r[k] < sizes_[k]) {
        *slot[k] = knobs[k].values[r[k]];
        break;
      }
      r[k] = 0;
      *slot[k] = knobs[k].values[0];
    }
    if (k == knobs.size()) return;
  }
}

std::shared_ptr<const SpaceIndex> SpaceIndex::Build(const codegen::KnobSpace& space,
                                                    const std::vector<codegen::Config>* valid,
                                                    uint64_t enumerate_limit) {
  auto s = std::make_shared<SpaceIndex>();
  s->space_ = space;
  long double product = 1;
  for (const auto& k : space.knobs()) {
    s->sizes_.push_back(static_cast<int>(k.values.size()));
    product *= k.values.size();
  }
  s->radix_fits_ = product < 9.0e18L;
  if (valid) {
    s->enumerated_ = true;
    Row r;
    for (const auto& c : *valid)
      if (s->FromConfig(c, &r) && s->by_code_.emplace(s->Code(r), s->rows_.size()).second)
        s->rows_.push_back(r);
  } else if (product <= enumerate_limit) {
    s->EnumerateAll();
  } else if (s->IsSparse()) {
    if (product <= kSparseEnumerateLimit) {
      s->EnumerateAll();
      s->seeds_ = {};
    } else if (s->seeds_.empty()) {
      s->FindSeed();  // rejection sampling will fail there: walks start from known points
    }
  } else {
    s->seeds_ = {};  // rejection sampling finds valid points: no walks
  }
  return s;
}

uint64_t SpaceIndex::Code(const Row& r) const {
  uint64_t code = 0;
  if (radix_fits_) {
    for (size_t k = r.size(); k-- > 0;) code = code * sizes_[k] + r[k];
    return code;
  }
  code = 0xcbf29ce484222325ULL;  // FNV-1a over the indices
  for (int32_t v : r) {
    code ^= static_cast<uint64_t>(v) + 1;
    code *= 0x100000001b3ULL;
  }
  return code;
}

int SpaceIndex::Find(const Row& r) const {
  auto it = by_code_.find(Code(r));
  return it == by_code_.end() ? -1 : it->second;
}

bool SpaceIndex::IsValid(const Row& r) const {
  if (enumerated_) return Find(r) >= 0;
  return space_.IsValid(ToConfig(r));
}

codegen::Config SpaceIndex::ToConfig(const Row& r) const {
  codegen::Config c;
  const auto& knobs = space_.knobs();
  for (size_t k = 0; k < knobs.size(); ++k) c[knobs[k].name] = knobs[k].values[r[k]];
  return c;
}

bool SpaceIndex::FromConfig(const codegen::Config& c, Row* r) const {
  const auto& knobs = space_.knobs();
  r->assign(knobs.size(), 0);
  for (size_t k = 0; k < knobs.size(); ++k) {
    auto it = c.find(knobs[k].name);
    // A knob the configuration predates: the value it ran with (KnobSpace::WithAbsentKnobs).
    if (it == c.end() && !knobs[k].absent_means) return false;
    const int64_t value = it != c.end() ? it->second : *knobs[k].absent_means;
    auto pos = std::find(knobs[k].values.begin(), knobs[k].values.end(), value);
    if (pos == knobs[k].values.end()) return false;
    (*r)[k] = static_cast<int32_t>(pos - knobs[k].values.begin());
  }
  return true;
}

std::vector<Row> SpaceIndex::Neighbours(const Row& r) const {
  std::vector<Row> out;
  Row n = r;
  for (size_t k = 0; k < sizes_.size(); ++k) {
    for (int v = 0; v < sizes_[k]; ++v) {
      if (v == r[k]) continue;
      n[k] = v;
      if (IsValid(n)) out.push_back(n);
    }
    n[k] = r[k];
  }
  return out;
}

bool SpaceIndex::RandomMove(const Row& r, std::mt19937_64& rng, Row* out) const {
  const int k = std::uniform_int_distribution<int>(0, num_knobs() - 1)(rng);
  const int size = sizes_[k];
  if (size < 2) return false;
  *out = r;
  if (std::uniform_real_distribution<>(0, 1)(rng) < 0.6) {
    (*out)[k] += std::uniform_int_distribution<int>(0, 1)(rng) ? 1 : -1;
    if ((*out)[k] < 0 || (*out)[k] >= size) return false;
  } else {
    const int v = std::uniform_int_distribution<int>(0, size - 2)(rng);
    (*out)[k] = v >= r[k] ? v + 1 : v;
  }
  return IsValid(*out);
}

bool SpaceIndex::SampleUniform(std::mt19937_64& rng, Row* out) const {
  if (enumerated_) {
    if (rows_.empty()) return false;
    *out = rows_[std::uniform_int_distribution<size_t>(0, rows_.size() - 1)(rng)];
    return true;
  }
  out->assign(sizes_.size(), 0);
  for (int tries = 0; tries < 4000; ++tries) {
    for (size_t k = 0; k < sizes_.size(); ++k)
      (*out)[k] = std::uniform_int_distribution<int>(0, sizes_[k] - 1)(rng);
    if (IsValid(*out)) return true;
  }
  if (seeds_.empty() || sizes_.empty()) return false;
  // Too few points are valid for rejection (a sparse space too large to enumerate): a random walk
  // from a known valid point, one knob at a time, every step to a valid point. Its stationary
  // distribution is uniform over the points it can reach.
  *out = seeds_[std::uniform_int_distribution<size_t>(0, seeds_.size() - 1)(rng)];
  Row next = *out;
  for (int step = 0; step < 256; ++step) {
    const size_t k = std::uniform_int_distribution<size_t>(0, sizes_.size() - 1)(rng);
    next[k] = std::uniform_int_distribution<int>(0, sizes_[k] - 1)(rng);
    if (IsValid(next))
      *out = next;
    else
      next[k] = (*out)[k];
  }
  return true;
}

bool Ledger::Record(const codegen::Config& c, bool ok, double median_us, Result* out) {
  Result res;
  if (!index_->FromConfig(c, &res.row)) return false;
  res.ok = ok && median_us > 0;
  res.log_us = res.ok ? std::log(median_us) : 0;
  auto it = seen_.insert({index_->Code(res.row), -1}).first;
  if (it->second >= 0) {  // measured again (a recovered job): keep the first result
    if (out) *out = results_[it->second];
    return true;
  }
  it->second = static_cast<int>(results_.size());
  if (res.ok && res.log_us < best_) {
    best_ = res.log_us;
    best_at_ = static_cast<int>(results_.size());
  }
  results_.push_back(res);
  if (out) *out = res;
  return true;
}

bool Ledger::RandomUnseen(std::mt19937_64& rng, Row* out) const {
  for (int t = 0, n = index_->enumerated() ? 200 : 20; t < n; ++t) {
    if (!index_->SampleUniform(rng, out)) return false;
    if (!Seen(*out)) return true;
  }
  const auto& rows = index_->rows();
  if (!index_->enumerated() || rows.empty()) return false;
  size_t start = std::uniform_int_distribution<size_t>(0, rows.size() - 1)(rng);
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[(start + i) % rows.size()];
    if (!Seen(r)) {
      *out = r;
      return true;
    }
  }
  return false;
}

const Ledger::Result* Ledger::Lookup(const Row& r) const {
  auto it = seen_.find(index_->Code(r));
  return it == seen_.end() || it->second < 0 ? nullptr : &results_[it->second];
}

}  // namespace kiln::agent
