#include "hardware/cpu/baselines/vendor_gemm.h"

#include <cblas.h>
#include <dlfcn.h>
#include <omp.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace kiln::hardware::cpu_baselines {

void SetOpenBlasThreads(int threads) { openblas_set_num_threads(threads); }
void SetOpenMpThreads(int threads) { omp_set_num_threads(threads); }

GemmFn OpenBlasSgemm(bool nk) {
  return [nk](int M, int N, int K, const float* A, const float* B, float* C) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, nk ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, K, B,
                nk ? K : N, 0.0f, C, N);
  };
}

GemmFn OpenBlasSgemv(bool nk) {
  return [nk](int, int N, int K, const float* A, const float* B, float* C) {
    if (nk)  // y[N] = W[N,K] x
      cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, B, K, A, 1, 0.0f, C, 1);
    else  // y[N] = B[K,N]^T x
      cblas_sgemv(CblasRowMajor, CblasTrans, K, N, 1.0f, B, N, A, 1, 0.0f, C, 1);
  };
}

GemmPrepack TransposeToNk() {
  GemmPrepack p;
  p.floats = [](int N, int K) { return static_cast<long>(N) * K; };
  p.pack = [](int N, int K, const float* B, float* out) {
    constexpr int kBlock = 64;  // cache-blocked transpose: the weights can be hundreds of MB
    for (int k0 = 0; k0 < K; k0 += kBlock)
      for (int n0 = 0; n0 < N; n0 += kBlock)
        for (int k = k0; k < std::min(K, k0 + kBlock); ++k)
          for (int n = n0; n < std::min(N, n0 + kBlock); ++n)
            out[static_cast<size_t>(n) * K + k] = B[static_cast<size_t>(k) * N + n];
  };
  return p;
}

namespace {

// BLIS's typed API (trans_t is an int-sized enum; dim_t and inc_t are 64-bit on x86-64).
using BliSgemm = void (*)(int, int, int64_t, int64_t, int64_t, const float*, const float*, int64_t,
                          int64_t, const float*, int64_t, int64_t, const float*, float*, int64_t,
                          int64_t);
using BliSetThreads = void (*)(int64_t);

struct Blis {
  BliSgemm sgemm = nullptr;
  BliSetThreads set_threads = nullptr;
  std::string error;
};

const Blis& LoadBlis() {
  static const Blis blis = [] {
    Blis b;
    void* h = dlopen("libblis.so.4", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) {
      b.error = absl::StrCat("BLIS not found (Debian package libblis4): ", dlerror());
      return b;
    }
    b.sgemm = reinterpret_cast<BliSgemm>(dlsym(h, "bli_sgemm"));
    b.set_threads = reinterpret_cast<BliSetThreads>(dlsym(h, "bli_thread_set_num_threads"));
    if (!b.sgemm || !b.set_threads) b.error = "BLIS lacks bli_sgemm or bli_thread_set_num_threads";
    return b;
  }();
  return blis;
}

}  // namespace

absl::StatusOr<GemmFn> BlisSgemm(int threads) {
  const Blis& blis = LoadBlis();
  if (!blis.error.empty()) return absl::UnavailableError(blis.error);
  blis.set_threads(threads);
  BliSgemm sgemm = blis.sgemm;
  return GemmFn([sgemm](int M, int N, int K, const float* A, const float* B, float* C) {
    const float one = 1, zero = 0;  // row-major: row stride = leading dimension, column stride 1
    sgemm(0, 0, M, N, K, &one, A, K, 1, B, N, 1, &zero, C, N, 1);
  });
}

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

class OnednnMatmulImpl final : public OnednnMatmul {
 public:
  OnednnMatmulImpl(int M, int N, int K, bool bf16, bool plain_weights)
      : M_(M), K_(K), bf16_(bf16), engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    const Dt wt = bf16 ? Dt::bf16 : Dt::f32;
    memory::desc src({M, K}, wt, Tag::ab), any({K, N}, wt, plain_weights ? Tag::ab : Tag::any),
        dst({M, N}, Dt::f32, Tag::ab);
    pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, any, dst), engine_);
    prim_ = dnnl::matmul(pd_);
    user_w_ = memory(memory::desc({K, N}, wt, Tag::ab), engine_, DNNL_MEMORY_NONE);
    src_ = memory(src, engine_, DNNL_MEMORY_NONE);
    wei_ = memory(pd_.weights_desc(), engine_, DNNL_MEMORY_NONE);
    dst_ = memory(dst, engine_, DNNL_MEMORY_NONE);
    if (bf16) a16_.resize(static_cast<size_t>(M) * K);
  }
  long PackedBytes() const override { return static_cast<long>(pd_.weights_desc().get_size()); }
  void Pack(const void* weights_kn, void* packed) override {
    user_w_.set_data_handle(const_cast<void*>(weights_kn));
    wei_.set_data_handle(packed);
    dnnl::reorder(user_w_, wei_).execute(stream_, user_w_, wei_);
    stream_.wait();
  }
  void Run(const float* A, const void* packed, float* C) override {
    if (bf16_) {  // round to nearest even, as a framework's .to(bfloat16) does
      const size_t n = static_cast<size_t>(M_) * K_;
      for (size_t i = 0; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, &A[i], 4);
        a16_[i] = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
      }
      src_.set_data_handle(a16_.data());
    } else {
      src_.set_data_handle(const_cast<float*>(A));
    }
    wei_.set_data_handle(const_cast<void*>(packed));
    dst_.set_data_handle(C);
    prim_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, wei_}, {DNNL_ARG_DST, dst_}});
    stream_.wait();
  }

 private:
  int M_, K_;
  bool bf16_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  memory user_w_, src_, wei_, dst_;
  std::vector<uint16_t> a16_;
};

class OnednnSoftmaxImpl final : public OnednnSoftmax {
 public:
  OnednnSoftmaxImpl(int rows, int cols) : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    memory::desc md({rows, cols}, Dt::f32, Tag::ab);
    dnnl::softmax_forward::primitive_desc pd(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md, 1), engine_);
    prim_ = dnnl::softmax_forward(pd);
    src_ = memory(md, engine_, DNNL_MEMORY_NONE);
    dst_ = memory(md, engine_, DNNL_MEMORY_NONE);
  }
  void Run(const float* in, float* out) override {
    src_.set_data_handle(const_cast<float*>(in));
    dst_.set_data_handle(out);
    prim_.execute(stream_, {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}});
    stream_.wait();
  }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::softmax_forward prim_;
  memory src_, dst_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<OnednnSoftmax>> OnednnSoftmax::Create(int rows, int cols) {
  try {
    return std::unique_ptr<OnednnSoftmax>(new OnednnSoftmaxImpl(rows, cols));
  } catch (const dnnl::error& e) {
    return absl::UnavailableError(absl::StrCat("oneDNN softmax ", rows, "x", cols, ": ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<OnednnMatmul>> OnednnMatmul::Create(int M, int N, int K, bool bf16,
                                                                   bool plain_weights) {
  try {
    return std::unique_ptr<OnednnMatmul>(new OnednnMatmulImpl(M, N, K, bf16, plain_weights));
  } catch (const dnnl::error& e) {
    return absl::UnavailableError(absl::StrCat("oneDNN matmul ", bf16 ? "bf16" : "f32", " ", M, "x",
                                               N, "x", K, ": ", e.what()));
  }
}

}  // namespace kiln::hardware::cpu_baselines
