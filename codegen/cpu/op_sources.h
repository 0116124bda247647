// The CPU operator templates' texts (cpu/templates/*.cc), embedded at configure time.
#pragma once

#include "codegen/cpu/gen/attention_decode_source.h"
#include "codegen/cpu/gen/attention_prefill_source.h"
#include "codegen/cpu/gen/conv1d_source.h"
#include "codegen/cpu/gen/gemm_bf16_source.h"
#include "codegen/cpu/gen/gemm_epilogue_source.h"
#include "codegen/cpu/gen/gemm_quant_source.h"
#include "codegen/cpu/gen/moe_gemm_source.h"
#include "codegen/cpu/gen/moe_router_source.h"
#include "codegen/cpu/gen/parallel_source.h"
#include "codegen/cpu/gen/rmsnorm_source.h"
#include "codegen/cpu/gen/rope_source.h"
#include "codegen/cpu/gen/softmax_source.h"
#include "codegen/cpu/gen/ssm_scan_source.h"
#include "codegen/cpu/gen/swiglu_source.h"
