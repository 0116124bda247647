// The simulated systolic-array accelerator's GEMM mapping template and its knob space
// (tiling in SRAM, dataflow, loop order, double buffering).
#pragma once

#include <memory>
#include <vector>

#include "codegen/device_template.h"

namespace kiln::codegen {

// Every sim template, for the registry (chip kind "sim"). ChipTraits.l2_bytes is the
// accelerator's on-chip SRAM, which the tiles must fit.
std::vector<std::unique_ptr<KernelTemplate>> NewSimTemplates();

// Dataflow knob values.
inline constexpr int kOutputStationary = 0, kWeightStationary = 1, kInputStationary = 2;

// SRAM bytes a mapping needs: A and B tiles (twice when double-buffered) plus the C tile.
int64_t SimSramBytes(const Config& c);

}  // namespace kiln::codegen
