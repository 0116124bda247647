#include "workers/trial_child.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "hardware/buffers.h"
#include "hardware/device.h"

namespace kiln::workers {
namespace {

// A frame larger than this is a broken stream, not a request.
constexpr uint32_t kMaxFrameBytes = 256u << 20;

bool ReadAll(int fd, char* data, size_t n, size_t* got) {
  *got = 0;
  while (*got < n) {
    ssize_t r = read(fd, data + *got, n - *got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    *got += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

uint32_t FrameLength(const char* header) {
  const auto* h = reinterpret_cast<const unsigned char*>(header);
  return h[0] | h[1] << 8 | h[2] << 16 | uint32_t{h[3]} << 24;
}

bool ReadFrame(int fd, std::string* out, std::string* error) {
  unsigned char header[4];
  size_t got = 0;
  errno = 0;
  if (!ReadAll(fd, reinterpret_cast<char*>(header), 4, &got)) {
    if (got > 0) *error = "the input ended inside a frame header";
    if (got == 0 && errno != 0)
      *error = absl::StrCat("cannot read a frame: ", std::strerror(errno));
    return false;
  }
  const uint32_t n = FrameLength(reinterpret_cast<const char*>(header));
  if (n > kMaxFrameBytes) {
    *error =
        absl::StrCat("a frame of ", n, " bytes is larger than the ", kMaxFrameBytes, " allowed");
    return false;
  }
  out->resize(n);
  if (!ReadAll(fd, out->data(), n, &got)) {
    *error = absl::StrCat("the input ended after ", got, " of a frame's ", n, " bytes");
    return false;
  }
  return true;
}

bool WriteFrame(int fd, const std::string& data) {
  const uint32_t n = static_cast<uint32_t>(data.size());
  std::string frame = {static_cast<char>(n), static_cast<char>(n >> 8), static_cast<char>(n >> 16),
                       static_cast<char>(n >> 24)};
  frame += data;
  for (size_t done = 0; done < frame.size();) {
    ssize_t w = write(fd, frame.data() + done, frame.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

v1::Measurement RunTrialRequest(const v1::SandboxRequest& req) {
  v1::Measurement m;
  auto device = hardware::OpenDevice(req.device(), &req.chip());
  if (!device.ok()) {
    m.set_status(v1::CRASHED);
    m.set_message(absl::StrCat("trial child: ", device.status().message()));
    return m;
  }
  hardware::MeasureOptions opts;
  opts.warm = req.warm();
  if (req.max_seconds() > 0) opts.max_seconds = req.max_seconds();
  opts.race_us = req.race_us();
  opts.only_route = req.baseline_route().name();
  opts.only_route_threads = req.baseline_route().threads();
  opts.seed = req.seed();
  if (req.kind() == v1::STEP) {
    auto r = (*device)->MeasureStep(req.step(), req.seed());
    if (r.ok()) {
      m.set_status(v1::OK);
      m.set_median_us(r->step_us());
      for (double s : r->samples_us()) m.add_samples_us(s);
      *m.mutable_step() = *r;
    } else {
      m.set_status(v1::CRASHED);
      m.set_message(absl::StrCat("step: ", r.status().message()));
    }
  } else if (req.kind() == v1::BASELINE) {
    m = (*device)->MeasureBaseline(req.workload(), opts);
  } else {
    hardware::CompiledKernel k;
    k.artifact = req.artifact();
    k.entry = req.entry();
    m = (*device)->Measure(req.workload(), k, opts);
  }
  return m;
}

int TrialChildMain() {
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  v1::SandboxRequest req;
  if (!req.ParseFromString(input)) {
    std::fprintf(stderr, "trial child: malformed request on stdin\n");
    return 3;
  }
  std::string out = RunTrialRequest(req).SerializeAsString();
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

int TrialServerMain() {
  // Results go to a private copy of stdout; whatever a kernel or library prints lands on stderr
  // instead of in the middle of a frame.
  const int results = fcntl(1, F_DUPFD_CLOEXEC, 3);  // not inherited by what a kernel starts
  if (results < 0 || dup2(2, 1) < 0) {
    std::fprintf(stderr, "trial server: cannot set up its output: %s\n", std::strerror(errno));
    return 3;
  }
  hardware::KeepArenasForReuse(true);
  for (;;) {
    std::string input, error;
    if (!ReadFrame(0, &input, &error)) {
      if (error.empty()) return 0;  // the worker closed our stdin: done
      std::fprintf(stderr, "trial server: %s\n", error.c_str());
      return 3;
    }
    v1::SandboxRequest req;
    if (!req.ParseFromString(input)) {
      std::fprintf(stderr, "trial server: malformed request\n");
      return 3;
    }
    if (!WriteFrame(results, RunTrialRequest(req).SerializeAsString())) return 3;
  }
}

int MaybeTrialChild(int argc, char** argv) {
  if (argc < 2) return -1;
  if (std::strcmp(argv[1], kTrialChildFlag) == 0) return TrialChildMain();
  if (std::strcmp(argv[1], kTrialServerFlag) == 0) return TrialServerMain();
  return -1;
}

}  // namespace kiln::workers
