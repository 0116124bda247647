// The library `kiln export` writes around a job's CPU kernels: one C header (kiln_kernels.h)
// with a uniquely named, typed function per kernel (and its prepack functions), a CMakeLists.txt
// that builds them into one library with one shared thread pool, a self-test program
// (kiln_kernels_selftest) that checks every kernel against a plain reference, and a README.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/json_text.h"
#include "kiln/v1/tuning_service.pb.h"

namespace kiln::cli {

// The files of the library (name, text) for the kernels of `kernels`, to be written next to
// them. Empty when the export holds no CPU kernel ("cpp" dialect): OpenCL and CUDA kernels are
// built by their own runtimes. Fails, naming the kernel, when a kernel's workload key cannot be
// read back or its entry point has no unique name (a coordinator older than the library
// export).
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> LibraryFiles(
    const v1::ExportKernelsResponse& kernels);

// The calling convention of one CPU kernel for manifest.json: its function, operands (type,
// shape, layout, role), scalars, the prepack step and threads. Null for other dialects.
absl::StatusOr<nlohmann::ordered_json> KernelConvention(
    const v1::ExportKernelsResponse::Kernel& kernel);

// The manifest's "library" section: what the header, the CMake targets and the self-test are,
// and how the kernels share threads. Null when LibraryFiles writes nothing.
nlohmann::ordered_json LibraryManifest(const v1::ExportKernelsResponse& kernels);

}  // namespace kiln::cli
