// The OpenCL C kernel templates (templates/*.cl) and their knob spaces: gemm, rmsnorm,
// softmax, swiglu and attention_decode.
#pragma once

#include <memory>
#include <vector>

#include "codegen/device_template.h"

namespace kiln::codegen {

// Every OpenCL template, for the registry (chip kind "opencl"). Device limits enter through
// ChipTraits: local_mem_bytes bounds local-memory tiles, max_work_group_size the work-groups.
std::vector<std::unique_ptr<KernelTemplate>> NewOpenClTemplates();

// Individually, for tests and docs.
std::unique_ptr<DeviceTemplate> NewOpenClGemmTemplate();
std::unique_ptr<DeviceTemplate> NewOpenClRmsNormTemplate();
std::unique_ptr<DeviceTemplate> NewOpenClSoftmaxTemplate();
std::unique_ptr<DeviceTemplate> NewOpenClSwigluTemplate();
std::unique_ptr<DeviceTemplate> NewOpenClAttentionDecodeTemplate();

}  // namespace kiln::codegen
