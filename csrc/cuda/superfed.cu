// SuPerFed client passes on the GPU. Reduce: one block per (segment, row), a strided loop and a
// fixed-order block tree per sum. Step: one thread per element; its segment comes from a binary
// search of the (few) segment offsets.
#include "cuda_utils.h"
#include "fastfair/superfed.h"
#include "reduce.cuh"

namespace fastfair {
namespace {

constexpr int kThreads = 256;

__global__ void reduce_kernel(SuperFedReduceArgs a) {
  __shared__ double smem[kThreads];
  const SuperFedLayout& L = a.layout;
  const int64_t s = blockIdx.x, r = blockIdx.y;
  const float* f = a.f + r * L.cols;
  const float* l = a.l + r * L.cols;
  const bool tw = L.twinned[s] != 0;
  double fl = 0, ff = 0, ll = 0, dd = 0;
  for (int64_t p = L.offsets[s] + threadIdx.x; p < L.offsets[s + 1]; p += blockDim.x) {
    const double fv = f[p], d = fv - double(a.g[p]);
    dd += d * d;
    if (tw) {
      const double lv = l[p];
      fl += fv * lv;
      ff += fv * fv;
      ll += lv * lv;
    }
  }
  fl = cuda_detail::block_sum(fl, smem);
  ff = cuda_detail::block_sum(ff, smem);
  ll = cuda_detail::block_sum(ll, smem);
  dd = cuda_detail::block_sum(dd, smem);
  if (threadIdx.x == 0) {
    double* o = a.out + 4 * (r * L.segments + s);
    o[0] = fl;
    o[1] = ff;
    o[2] = ll;
    o[3] = dd;
  }
}

__device__ __forceinline__ int64_t segment_of(const SuperFedLayout& L, int64_t p) {
  int64_t lo = 0, hi = L.segments - 1;  // the last s with offsets[s] <= p
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (L.offsets[mid] <= p) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__global__ void step_kernel(SuperFedStepArgs a) {
  const SuperFedLayout& L = a.layout;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= L.rows * L.cols) return;
  const int64_t r = i / L.cols, p = i - r * L.cols;
  const int64_t s = segment_of(L, p);
  const bool tw = L.twinned[s] != 0;
  const float lam = tw ? float(a.lam[r * L.segments + s]) : 0.0f;
  const float lam_next = tw ? float((a.lam_next ? a.lam_next : a.lam)[r * L.segments + s]) : 0.0f;
  float fv = a.f[i];
  float lv = tw ? a.l[i] : 0.0f;
  if (a.grad && a.active[r]) {
    const float dl = a.grad[i];
    const double* o = a.orth + 4 * r;
    const float af = tw ? float(o[0]) : 0.0f, bfc = tw ? float(o[1]) : 0.0f;
    const float lr = float(a.lr), mom = float(a.momentum), wd = float(a.weight_decay);
    const float gf = (1.0f - lam) * dl + float(a.prox[r * L.segments + s]) * (fv - a.g[p]) +
                     wd * fv + af * lv + bfc * fv;
    const float nbf = mom * a.buf_f[i] + gf;
    a.buf_f[i] = nbf;
    if (tw && a.train_local) {
      const float gl = lam * dl + wd * lv + float(o[2]) * fv + float(o[3]) * lv;
      const float nbl = mom * a.buf_l[i] + gl;
      a.buf_l[i] = nbl;
      lv -= float(a.lr) * nbl;
      a.l[i] = lv;
    }
    fv -= lr * nbf;
    a.f[i] = fv;
  }
  const float mix = a.grad ? lam_next : lam;
  a.mixed[i] = tw ? (1.0f - mix) * fv + mix * lv : fv;
}

}  // namespace

namespace cuda {

Status superfed_reduce(const SuperFedReduceArgs& a, void* stream) {
  const SuperFedLayout& L = a.layout;
  if (L.rows == 0 || L.segments == 0) return Status::success();
  if (L.rows > 65535 || L.segments > 2147483647)
    return Status::error("superfed_reduce on CUDA supports at most 65535 rows; split the cohort");
  reduce_kernel<<<dim3(unsigned(L.segments), unsigned(L.rows)), kThreads, 0,
                  static_cast<cudaStream_t>(stream)>>>(a);
  return cuda_detail::check(cudaGetLastError(), "superfed_reduce kernel launch");
}

Status superfed_step(const SuperFedStepArgs& a, void* stream) {
  const int64_t total = a.layout.rows * a.layout.cols;
  if (total == 0) return Status::success();
  step_kernel<<<unsigned((total + kThreads - 1) / kThreads), kThreads, 0,
                static_cast<cudaStream_t>(stream)>>>(a);
  return cuda_detail::check(cudaGetLastError(), "superfed_step kernel launch");
}

}  // namespace cuda
}  // namespace fastfair
