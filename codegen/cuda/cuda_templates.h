// The CUDA C++ kernel templates (templates/*.cu, compiled by NVRTC) and their knob spaces:
// gemm, rmsnorm, softmax, swiglu and attention_decode.
#pragma once

#include <memory>
#include <vector>

#include "codegen/device_template.h"

namespace kiln::codegen {

// Every CUDA template, for the registry (chip kind "cuda"). Device limits enter through
// ChipTraits: local_mem_bytes (static shared memory per block), max_work_group_size (threads).
std::vector<std::unique_ptr<KernelTemplate>> NewCudaTemplates();

}  // namespace kiln::codegen
