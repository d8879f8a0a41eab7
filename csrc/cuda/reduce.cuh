// Deterministic block-wide reductions (fixed tree order) shared by fastfair's CUDA kernels.
#pragma once

#include <cuda_runtime.h>

namespace fastfair::cuda_detail {

// Sum over the block; every thread gets the result. `smem` holds blockDim.x doubles; blockDim.x
// must be a power of two.
__device__ inline double block_sum(double v, double* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
    __syncthreads();
  }
  const double r = smem[0];
  __syncthreads();
  return r;
}

__device__ inline double block_max(double v, double* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) smem[threadIdx.x] = fmax(smem[threadIdx.x], smem[threadIdx.x + s]);
    __syncthreads();
  }
  const double r = smem[0];
  __syncthreads();
  return r;
}

// Online log-sum-exp pair (max, sum exp(scale * (. - max))) for a scale >= 0 applied after the
// difference; max = -inf means an empty pair.
struct MaxSum {
  double max, sum;
};

__device__ inline MaxSum combine(MaxSum a, MaxSum b, double scale) {
  if (a.max == -INFINITY) return b;
  if (b.max == -INFINITY) return a;
  if (isnan(a.max) || isnan(b.max)) return {NAN, NAN};
  const double m = fmax(a.max, b.max);
  return {m, a.sum * exp(scale * (a.max - m)) + b.sum * exp(scale * (b.max - m))};
}

__device__ inline MaxSum block_combine(MaxSum v, double scale, double* smem_max,
                                       double* smem_sum) {
  smem_max[threadIdx.x] = v.max;
  smem_sum[threadIdx.x] = v.sum;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const MaxSum r = combine({smem_max[threadIdx.x], smem_sum[threadIdx.x]},
                               {smem_max[threadIdx.x + s], smem_sum[threadIdx.x + s]}, scale);
      smem_max[threadIdx.x] = r.max;
      smem_sum[threadIdx.x] = r.sum;
    }
    __syncthreads();
  }
  const MaxSum r{smem_max[0], smem_sum[0]};
  __syncthreads();
  return r;
}

}  // namespace fastfair::cuda_detail
