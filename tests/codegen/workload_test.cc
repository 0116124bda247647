// Workload parsing and validation: every rule names the field, and keys are canonical.
#include "codegen/workload.h"

#include <set>
#include <string>

#include "codegen/op_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln::codegen {
namespace {

using ::testing::HasSubstr;

TEST(Workload, ParsesAGemmShapeIntoItsCanonicalKey) {
  auto w = ParseWorkload("GEMM", " m=8, N=4096,K=4096 ");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(WorkloadKey(*w), "gemm m=8 n=4096 k=4096 fp32");
  EXPECT_DOUBLE_EQ(WorkloadFlops(*w), 2.0 * 8 * 4096 * 4096);
  EXPECT_DOUBLE_EQ(WorkloadBytes(*w), 4.0 * (8 * 4096 + 4096 * 4096 + 8 * 4096));
}

TEST(Workload, EveryBadInputNamesWhatIsWrong) {
  EXPECT_THAT(std::string(ParseWorkload("conv9d", "M=1").status().message()),
              HasSubstr("unknown operator 'conv9d'"));
  EXPECT_THAT(std::string(ParseWorkload("gemm", "M=0,N=1,K=1").status().message()),
              HasSubstr("M=0 is out of range"));
  EXPECT_THAT(std::string(ParseWorkload("gemm", "M=1,N=1").status().message()),
              HasSubstr("needs dimension K"));
  EXPECT_THAT(std::string(ParseWorkload("gemm", "M=1,N=1,K=1,Q=2").status().message()),
              HasSubstr("no dimension Q"));
  EXPECT_THAT(std::string(ParseWorkload("gemm", "M=1,N=x,K=1").status().message()),
              HasSubstr("NAME=INTEGER"));
  EXPECT_THAT(std::string(ParseWorkload("gemm", "M=1,M=2,N=1,K=1").status().message()),
              HasSubstr("given twice"));
  EXPECT_THAT(
      std::string(ParseWorkload("gemm", "M=1048576,N=1048576,K=1048576").status().message()),
      HasSubstr("limit is 16 GiB"));
  EXPECT_THAT(std::string(ParseWorkload("rmsnorm", "T=1,D=64", "bf16").status().message()),
              HasSubstr("bf16 is supported for gemm and moe_gemm"));
  EXPECT_THAT(std::string(ParseWorkload("gemm", "M=1,N=1,K=1", "fp64").status().message()),
              HasSubstr("unknown dtype"));
}

// int8 and int4 hold 32 weights along K under one scale, for the GEMM and the experts' GEMM.
TEST(Workload, QuantizedWeightsNeedWholeGroupsAlongK) {
  for (const char* dtype : {"int8", "int4"}) {
    EXPECT_TRUE(ParseWorkload("gemm", "M=1,N=8,K=64", dtype).ok()) << dtype;
    EXPECT_TRUE(ParseWorkload("moe_gemm", "T=1,E=4,TOPK=2,N=8,K=64", dtype).ok()) << dtype;
    EXPECT_THAT(
        std::string(ParseWorkload("moe_gemm", "T=1,E=4,TOPK=2,N=8,K=20", dtype).status().message()),
        HasSubstr("K=20 is not a multiple of"));
  }
}

TEST(Workload, EpiloguesBelongToTheirOperators) {
  v1::Workload w = *ParseWorkload("gemm", "M=1,N=8,K=8");
  for (const char* e : {"bias", "silu", "gelu", "residual"}) {
    w.set_epilogue(e);
    EXPECT_TRUE(ValidateWorkload(w).ok()) << e;
  }
  w.set_epilogue("relu6");
  EXPECT_THAT(std::string(ValidateWorkload(w).message()),
              HasSubstr("workload.epilogue: 'relu6' is not an epilogue of gemm"));
  v1::Workload norm = *ParseWorkload("rmsnorm", "T=1,D=64");
  norm.set_epilogue("residual");
  EXPECT_TRUE(ValidateWorkload(norm).ok());
  v1::Workload soft = *ParseWorkload("softmax", "T=1,N=64");
  soft.set_epilogue("bias");
  EXPECT_THAT(std::string(ValidateWorkload(soft).message()), HasSubstr("not an epilogue of"));
}

TEST(Workload, OperatorRulesHold) {
  EXPECT_THAT(
      std::string(
          ParseWorkload("attention_decode", "B=1,H=32,KVH=5,D=128,L=64").status().message()),
      HasSubstr("KVH must divide H"));
  EXPECT_THAT(std::string(ParseWorkload("moe_router", "T=1,D=64,E=8,TOPK=9").status().message()),
              HasSubstr("TOPK must be <= E"));
  EXPECT_THAT(std::string(ParseWorkload("rope", "T=1,H=2,D=7").status().message()),
              HasSubstr("D must be even"));
  auto attn = ParseWorkload("attention_decode", "B=1,H=32,KVH=8,D=128,L=4096");
  ASSERT_TRUE(attn.ok());
  EXPECT_EQ(WorkloadKey(*attn), "attention_decode b=1 h=32 kvh=8 d=128 l=4096 fp32");
  EXPECT_GT(WorkloadBytes(*attn), 2.0 * 4 * 8 * 4096 * 128);  // the KV cache
}

}  // namespace
// The operator table has one entry per OpKind, in OpKind order, each with distinct dimensions
// and positive costs; the workload functions read it.
TEST(OperatorTable, OneEntryPerOperatorKind) {
  std::set<v1::OpKind> seen;
  v1::OpKind previous = v1::OP_KIND_UNSPECIFIED;
  for (const Operator& op : Operators()) {
    EXPECT_GT(op.kind, previous) << OpName(op.kind);
    previous = op.kind;
    seen.insert(op.kind);
    std::set<std::string> dims(op.dims.begin(), op.dims.end());
    EXPECT_EQ(dims.size(), op.dims.size()) << OpName(op.kind) << " names a dimension twice";
    ASSERT_FALSE(op.dims.empty()) << OpName(op.kind);
    v1::Workload w;
    w.set_op(op.kind);
    for (const char* d : op.dims) (*w.mutable_dims())[d] = 64;
    ASSERT_TRUE(ValidateWorkload(w).ok()) << ValidateWorkload(w);
    EXPECT_GT(WorkloadFlops(w), 0) << OpName(op.kind);
    EXPECT_GT(WorkloadBytes(w), 0) << OpName(op.kind);
    EXPECT_EQ(OrderedDims(w), std::vector<long long>(op.dims.size(), 64));
    EXPECT_NE(std::string(op.meaning), "") << OpName(op.kind);
  }
  for (int i = 1; i <= v1::OpKind_MAX; ++i)
    if (v1::OpKind_IsValid(i)) {
      EXPECT_TRUE(seen.count(static_cast<v1::OpKind>(i)))
          << OpName(static_cast<v1::OpKind>(i)) << " is missing from codegen/op_table.cc";
    }
}

}  // namespace kiln::codegen
