#include "hardware/replay/replay_device.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "hardware/device_registry.h"

namespace kiln::hardware {
namespace {

constexpr uint64_t kBitmapLimit = uint64_t{1} << 22;
constexpr char kArtifactPrefix[] = "replay:";

v1::Measurement Failed(v1::MeasurementStatus status, std::string message) {
  v1::Measurement m;
  m.set_status(status);
  m.set_message(std::move(message));
  return m;
}

class ReplayDevice final : public Device {
 public:
  ReplayDevice(std::string path, std::shared_ptr<const ReplaySet> set, v1::ChipFingerprint fp)
      : path_(std::move(path)), set_(std::move(set)), fp_(std::move(fp)) {}

  const v1::ChipFingerprint& Fingerprint() const override { return fp_; }
  bool Supports(const v1::Workload&) const override { return true; }

  // "Compiling" looks the configuration up; the artifact carries the recorded measurement, so
  // the measuring child does not read the file again. A recorded compile failure fails here.
  absl::StatusOr<CompiledKernel> Compile(const codegen::Kernel& kernel) override {
    if (kernel.dialect != "replay")
      return absl::InvalidArgumentError(
          absl::StrCat("replay device takes dialect 'replay', not '", kernel.dialect, "'"));
    auto set = Set();
    if (!set.ok()) return set.status();
    codegen::Config c(kernel.defines.begin(), kernel.defines.end());
    const ReplayEntry* e = (*set)->Find(c);
    if (!e)
      return absl::NotFoundError(absl::StrCat("configuration ", codegen::ConfigKey(c),
                                              " is not recorded in ", (*set)->name));
    if (e->status == v1::COMPILE_ERROR)
      return absl::InvalidArgumentError(absl::StrCat("recorded as ", e->message));
    CompiledKernel k;
    k.artifact = absl::StrCat(kArtifactPrefix,
                              absl::Base64Escape((*set)->MeasurementOf(*e).SerializeAsString()));
    k.entry = kernel.entry;
    k.source_hash = kernel.Hash();
    k.toolchain = absl::StrCat("replay of ", (*set)->name);
    return k;
  }

  v1::Measurement Measure(const v1::Workload&, const CompiledKernel& kernel,
                          const MeasureOptions&) override {
    std::string bytes;
    v1::Measurement m;
    if (kernel.artifact.rfind(kArtifactPrefix, 0) != 0 ||
        !absl::Base64Unescape(kernel.artifact.substr(strlen(kArtifactPrefix)), &bytes) ||
        !m.ParseFromString(bytes))
      return Failed(v1::CRASHED, absl::StrCat("not a replay artifact: ", kernel.artifact));
    return m;
  }

  std::string BaselineName(const v1::Workload&) const override { return "recorded-median"; }

  // The recorded set's median configuration: what a typical, untuned choice gives.
  v1::Measurement MeasureBaseline(const v1::Workload&, const MeasureOptions&) override {
    auto set = Set();
    if (!set.ok()) return Failed(v1::CRASHED, std::string(set.status().message()));
    std::vector<const ReplayEntry*> ok;
    for (const auto& e : (*set)->entries)
      if (e.status == v1::OK) ok.push_back(&e);
    if (ok.empty()) return Failed(v1::UNSUPPORTED, "no configuration in the set ran");
    std::nth_element(ok.begin(), ok.begin() + ok.size() / 2, ok.end(),
                     [](auto* a, auto* b) { return a->median_us < b->median_us; });
    v1::Measurement m = (*set)->MeasurementOf(*ok[ok.size() / 2]);
    m.set_message(absl::StrCat("median configuration of ", (*set)->name));
    return m;
  }

 private:
  absl::StatusOr<std::shared_ptr<const ReplaySet>> Set() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!set_) {
      auto loaded = LoadReplaySet(path_);
      if (!loaded.ok()) return loaded.status();
      set_ = *loaded;
    }
    return set_;
  }

  std::string path_;
  std::mutex mu_;
  std::shared_ptr<const ReplaySet> set_;
  v1::ChipFingerprint fp_;
};

v1::ChipFingerprint FingerprintOf(const ReplaySet& set) {
  v1::ChipFingerprint fp = set.Chip();
  DescribeSpace(set, &fp);
  return fp;
}

}  // namespace

void DescribeSpace(const ReplaySet& set, v1::ChipFingerprint* fp) {
  fp->clear_replay_knobs();
  fp->clear_replay_present();
  long double cartesian = 1;
  for (const auto& k : set.knobs) {
    v1::KnobDomain* d = fp->add_replay_knobs();
    d->set_name(k.name);
    for (int64_t v : k.values) d->add_values(v);
    cartesian *= k.values.size();
  }
  if (cartesian > kBitmapLimit) return;
  std::string bits((static_cast<uint64_t>(cartesian) + 7) / 8, '\0');
  for (const auto& e : set.entries) {
    uint64_t index = 0, stride = 1;
    for (size_t k = 0; k < set.knobs.size(); ++k) {
      index += stride * e.index[k];
      stride *= set.knobs[k].values.size();
    }
    bits[index / 8] = static_cast<char>(bits[index / 8] | (1 << (index % 8)));
  }
  fp->set_replay_present(std::move(bits));
}

absl::StatusOr<std::unique_ptr<Device>> NewReplayDevice(const std::string& path,
                                                        const v1::ChipFingerprint* known) {
  if (path.empty()) return absl::InvalidArgumentError("device replay:PATH needs a file path");
  if (known) return std::unique_ptr<Device>(new ReplayDevice(path, nullptr, *known));
  auto set = LoadReplaySet(path);
  if (!set.ok()) return set.status();
  v1::ChipFingerprint fp = FingerprintOf(**set);
  return std::unique_ptr<Device>(new ReplayDevice(path, *set, std::move(fp)));
}

std::unique_ptr<Device> NewReplayDevice(std::shared_ptr<const ReplaySet> set) {
  v1::ChipFingerprint fp = FingerprintOf(*set);
  return std::make_unique<ReplayDevice>(set->name, std::move(set), std::move(fp));
}

Backend ReplayBackend() {
  return {"replay", "replay:PATH",
          [](const std::string& spec, const v1::ChipFingerprint* known)
              -> std::optional<absl::StatusOr<std::unique_ptr<Device>>> {
            if (spec.rfind("replay:", 0) != 0) return std::nullopt;
            return NewReplayDevice(spec.substr(7), known);
          }};
}

}  // namespace kiln::hardware
