// Batched simplex QPs on the GPU: FISTA with gradient restart and Euclidean simplex projections,
// one thread block per problem, the same iteration as the host FISTA in csrc/cpu/simd/ons.cpp.
// Vectors live in shared memory; H is read from global memory one warp per row (coalesced).
#include <algorithm>
#include <cfloat>

#include "cuda_utils.h"
#include "fastfair/ons.h"

namespace fastfair {
namespace {

constexpr int kPolishMax = 48;  // largest support polished exactly (its factor sits in shared memory)

struct Vectors {
  double *x, *y, *g, *v;
  double* red;  // [32] reduction scratch
  double* M;    // [kPolishMax^2] polish factor
  double* rhs;  // [2 * kPolishMax]
  int* idx;     // [kPolishMax]
};

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_max(double v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reductions in a fixed order (warp shuffles, then warp 0 over the warp results), so the
// result depends only on the block size. Every thread gets the value.
template <bool kMax>
__device__ double block_reduce(double v, double* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // red may still be read by the previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double w = lane < warps ? red[lane] : (kMax ? -DBL_MAX : 0.0);
    w = kMax ? warp_max(w) : warp_sum(w);
    if (lane == 0) red[0] = w;
  }
  __syncthreads();
  return red[0];
}
__device__ double block_sum(double v, double* red) { return block_reduce<false>(v, red); }
__device__ double block_max(double v, double* red) { return block_reduce<true>(v, red); }

// out_i = (H x)_i - b_i, one warp per row.
__device__ void residual(const double* __restrict__ H, const double* __restrict__ b, int K,
                         const double* x, double* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int i = warp; i < K; i += warps) {
    const double* h = H + size_t(i) * K;
    double s = 0.0;
    for (int j = lane; j < K; j += 32) s += h[j] * x[j];
    s = warp_sum(s);
    if (lane == 0) out[i] = s - b[i];
  }
  __syncthreads();
}

// Euclidean projection of v onto the simplex, in place (Michelot's iteration).
__device__ void project_simplex(double* v, int K, double* red) {
  double local = 0.0;
  for (int i = threadIdx.x; i < K; i += blockDim.x) local += v[i];
  double tau = (block_sum(local, red) - 1.0) / K;
  double count = K;
  for (;;) {
    double s = 0.0, c = 0.0;
    for (int i = threadIdx.x; i < K; i += blockDim.x)
      if (v[i] > tau) { s += v[i]; c += 1.0; }
    s = block_sum(s, red);
    c = block_sum(c, red);
    if (c == count) break;
    count = c;
    tau = (s - 1.0) / c;
  }
  for (int i = threadIdx.x; i < K; i += blockDim.x) v[i] = fmax(v[i] - tau, 0.0);
  __syncthreads();
}

// Clamps and rescales p onto the simplex.
__device__ void to_simplex(double* p, int K, double* red) {
  double local = 0.0;
  for (int i = threadIdx.x; i < K; i += blockDim.x) {
    p[i] = fmax(p[i], 0.0);
    local += p[i];
  }
  const double inv = 1.0 / block_sum(local, red);
  for (int i = threadIdx.x; i < K; i += blockDim.x) p[i] *= inv;
  __syncthreads();
}

// The certificate of fastfair/ons.h for p; uses `work` [K] as scratch. Returns the scaled
// residual; *support receives |{p_i > 0}|.
__device__ double certify(const double* __restrict__ H, const double* __restrict__ b, int K,
                          const double* p, double* work, double* red, double* support) {
  residual(H, b, K, p, work);
  double hp = 0.0, bm = 0.0, rmax = -DBL_MAX, negmin = -DBL_MAX, cnt = 0.0, sp = 0.0;
  for (int i = threadIdx.x; i < K; i += blockDim.x) {
    hp = fmax(hp, fabs(H[size_t(i) * K + i]));
    bm = fmax(bm, fabs(b[i]));
    sp += p[i];
    if (p[i] > 0.0) {
      rmax = fmax(rmax, work[i]);
      negmin = fmax(negmin, -work[i]);
      cnt += 1.0;
    }
  }
  const double scale = 1.0 + fmax(block_max(hp, red), block_max(bm, red));
  rmax = block_max(rmax, red);
  const double rmin = -block_max(negmin, red);
  *support = block_sum(cnt, red);
  const double primal = fabs(block_sum(sp, red) - 1.0);
  const double nu = 0.5 * (rmax + rmin);
  double dual = 0.0;
  for (int i = threadIdx.x; i < K; i += blockDim.x)
    if (!(p[i] > 0.0)) dual = fmax(dual, nu - work[i]);
  dual = block_max(dual, red);
  return fmax(fmax(0.5 * (rmax - rmin), dual), primal) / scale;
}

// Solves the equality-constrained problem on the support of x (|F| <= kPolishMax) into q; returns
// false (uniformly across the block) when the factor fails or q has a negative entry.
__device__ bool polish(const double* __restrict__ H, const double* __restrict__ b, int K,
                       const double* x, double* q, Vectors& s) {
  __shared__ int n_shared;
  __shared__ int ok_shared;
  if (threadIdx.x == 0) {
    int n = 0;
    for (int i = 0; i < K; ++i)
      if (x[i] > 0.0) s.idx[n++] = i;
    n_shared = n;
    int ok = n > 0;
    double* M = s.M;
    double *u = s.rhs, *w = s.rhs + kPolishMax;
    for (int a = 0; a < n && ok; ++a)
      for (int c = 0; c <= a; ++c) M[a * n + c] = H[size_t(s.idx[a]) * K + s.idx[c]];
    // Cholesky (lower, row-major) and two solves by one thread: |F| <= 48 is a few 10^4 flops.
    for (int j = 0; j < n && ok; ++j) {
      double d = M[j * n + j];
      const double d0 = d;
      for (int k = 0; k < j; ++k) d -= M[j * n + k] * M[j * n + k];
      if (!(d > 64 * DBL_EPSILON * d0)) { ok = 0; break; }
      d = sqrt(d);
      M[j * n + j] = d;
      for (int i = j + 1; i < n; ++i) {
        double t = M[i * n + j];
        for (int k = 0; k < j; ++k) t -= M[i * n + k] * M[j * n + k];
        M[i * n + j] = t / d;
      }
    }
    if (ok) {
      for (int a = 0; a < n; ++a) { u[a] = b[s.idx[a]]; w[a] = 1.0; }
      for (int i = 0; i < n; ++i) {
        double su = u[i], sw = w[i];
        for (int k = 0; k < i; ++k) { su -= M[i * n + k] * u[k]; sw -= M[i * n + k] * w[k]; }
        u[i] = su / M[i * n + i];
        w[i] = sw / M[i * n + i];
      }
      for (int i = n - 1; i >= 0; --i) {
        double su = u[i], sw = w[i];
        for (int k = i + 1; k < n; ++k) { su -= M[k * n + i] * u[k]; sw -= M[k * n + i] * w[k]; }
        u[i] = su / M[i * n + i];
        w[i] = sw / M[i * n + i];
      }
      double tu = 0.0, tw = 0.0;
      for (int a = 0; a < n; ++a) { tu += u[a]; tw += w[a]; }
      const double nu = (1.0 - tu) / tw;
      for (int a = 0; a < n; ++a) {
        u[a] += nu * w[a];
        if (u[a] < 0.0) ok = 0;
      }
    }
    ok_shared = ok;
  }
  __syncthreads();
  if (!ok_shared) return false;
  for (int i = threadIdx.x; i < K; i += blockDim.x) q[i] = 0.0;
  __syncthreads();
  for (int a = threadIdx.x; a < n_shared; a += blockDim.x) q[s.idx[a]] = s.rhs[a];
  __syncthreads();
  return true;
}

__global__ void fista_kernel(const double* __restrict__ Hall, const double* __restrict__ ball,
                             int K, int64_t max_iter, double tol, double* __restrict__ pall,
                             double* __restrict__ kkt, int64_t* __restrict__ iterations,
                             int64_t* __restrict__ support) {
  extern __shared__ double smem[];
  Vectors s;
  s.x = smem;
  s.y = s.x + K;
  s.g = s.y + K;
  s.v = s.g + K;
  s.red = s.v + K;
  s.M = s.red + 32;
  s.rhs = s.M + kPolishMax * kPolishMax;
  s.idx = reinterpret_cast<int*>(s.rhs + 2 * kPolishMax);

  const int64_t prob = blockIdx.x;
  const double* H = Hall + prob * int64_t(K) * K;
  const double* b = ball + prob * int64_t(K);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;

  // Gershgorin bound of lambda_max(H): the step is 1/L.
  double rowmax = 0.0;
  for (int i = warp; i < K; i += warps) {
    const double* h = H + size_t(i) * K;
    double t = 0.0;
    for (int j = lane; j < K; j += 32) t += fabs(h[j]);
    rowmax = fmax(rowmax, warp_sum(t));
  }
  const double L = block_max(lane == 0 ? rowmax : 0.0, s.red);
  double bm = 0.0;
  for (int i = threadIdx.x; i < K; i += blockDim.x) {
    s.x[i] = 1.0 / K;
    s.y[i] = 1.0 / K;
    bm = fmax(bm, fabs(b[i]));
  }
  const double scale = 1.0 + fmax(L, block_max(bm, s.red));

  double t = 1.0;
  int64_t it = 0;
  while (it < max_iter) {
    ++it;
    residual(H, b, K, s.y, s.g);
    for (int i = threadIdx.x; i < K; i += blockDim.x) s.v[i] = s.y[i] - s.g[i] / L;
    __syncthreads();
    project_simplex(s.v, K, s.red);
    double moved = 0.0, up = 0.0;
    for (int i = threadIdx.x; i < K; i += blockDim.x) {
      moved = fmax(moved, fabs(s.v[i] - s.y[i]));
      up += s.g[i] * (s.v[i] - s.x[i]);
    }
    moved = block_max(moved, s.red);
    up = block_sum(up, s.red);
    double mom = 0.0;
    if (up > 0.0) {
      t = 1.0;  // momentum points uphill: restart
    } else {
      const double tn = 0.5 * (1.0 + sqrt(1.0 + 4.0 * t * t));
      mom = (t - 1.0) / tn;
      t = tn;
    }
    for (int i = threadIdx.x; i < K; i += blockDim.x) {
      const double xn = s.v[i];
      s.y[i] = xn + mom * (xn - s.x[i]);
      s.x[i] = xn;
    }
    __syncthreads();
    if (L * moved <= tol * scale) break;
  }

  double sup = 0.0;
  to_simplex(s.x, K, s.red);
  double best = certify(H, b, K, s.x, s.g, s.red, &sup);
  double nx = 0.0;
  for (int i = threadIdx.x; i < K; i += blockDim.x) nx += s.x[i] > 0.0 ? 1.0 : 0.0;
  nx = block_sum(nx, s.red);
  if (nx <= kPolishMax && polish(H, b, K, s.x, s.y, s)) {
    to_simplex(s.y, K, s.red);
    double sup_q = 0.0;
    const double trial = certify(H, b, K, s.y, s.g, s.red, &sup_q);
    if (trial <= best) {
      best = trial;
      sup = sup_q;
      for (int i = threadIdx.x; i < K; i += blockDim.x) s.x[i] = s.y[i];
      __syncthreads();
    }
  }
  double* p = pall + prob * int64_t(K);
  for (int i = threadIdx.x; i < K; i += blockDim.x) p[i] = s.x[i];
  if (threadIdx.x == 0) {
    kkt[prob] = best;
    iterations[prob] = it;
    support[prob] = int64_t(sup);
  }
}

}  // namespace

namespace cuda {

Status simplex_qp_batched(const SimplexQpBatchArgs& a, void* stream_ptr) {
  if (a.method != 1) return Status::error("the CUDA simplex QP solver is FISTA only");
  if (a.K > kSimplexQpMaxK)
    return Status::error("K = " + std::to_string(a.K) + " exceeds the CUDA solver's limit of " +
                         std::to_string(kSimplexQpMaxK) + "; solve on the host");
  if (a.batch == 0) return Status::success();
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int K = static_cast<int>(a.K);
  const int threads = K <= 64 ? 32 : (K <= 512 ? 128 : 256);
  const size_t smem = sizeof(double) * (4 * size_t(K) + 32 + kPolishMax * kPolishMax +
                                        2 * kPolishMax) + sizeof(int) * kPolishMax;
  Status st = cuda_detail::check(
      cudaFuncSetAttribute(fista_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
      "simplex_qp shared memory");
  if (!st.ok) return st;
  const int64_t max_iter = a.max_iter > 0 ? a.max_iter : 10000;
  fista_kernel<<<static_cast<unsigned>(a.batch), threads, smem, stream>>>(
      a.H, a.b, K, max_iter, a.tol, a.p, a.kkt, a.iterations, a.support);
  return cuda_detail::check(cudaGetLastError(), "simplex_qp kernel launch");
}

}  // namespace cuda
}  // namespace fastfair
