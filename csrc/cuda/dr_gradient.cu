#include "cuda_utils.h"
#include "fastfair/dr_gradient.h"
#include "reduce.cuh"

namespace fastfair {
namespace {

constexpr int kThreads = 256;

// sigma and mean(r) / sigma of a round (fastfair/dr_gradient.h: the formulas run on r / sigma).
__device__ inline void scaled_mean(const double* __restrict__ r, int64_t m, double* sm,
                                   double* sigma, double* rbar) {
  double t = 0.0;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) t = fmax(t, fabs(r[j]));
  *sigma = dr_response_scale(cuda_detail::block_max(t, sm));
  t = 0.0;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) t += r[j] / *sigma;
  *rbar = cuda_detail::block_sum(t, sm) / double(m);
}

__global__ void mass_partials(const double* __restrict__ p, int64_t K, double* __restrict__ ws) {
  __shared__ double sm[kThreads];
  const int64_t begin = int64_t(blockIdx.x) * kDrBlock;
  const int64_t end = min(K, begin + kDrBlock);
  double s = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) s += p[i];
  s = cuda_detail::block_sum(s, sm);
  if (threadIdx.x == 0) ws[blockIdx.x] = s;
}

// One block: ws[nb .. nb+3] = (den, rbar, rbar * s / den^2, sigma) on responses / sigma.
__global__ void dr_scalars(const double* __restrict__ p, int64_t K, const int64_t* __restrict__ ids,
                           const double* __restrict__ r, int64_t m, double c, DrVariant v,
                           double* __restrict__ ws, int64_t nb) {
  __shared__ double sm[kThreads];
  double t = 0.0;
  for (int64_t k = threadIdx.x; k < nb; k += kThreads) t += ws[k];
  const double mass = cuda_detail::block_sum(t, sm);
  double sigma = 1.0, rbar = 0.0;
  scaled_mean(r, m, sm, &sigma, &rbar);
  const double den = 1.0 / sigma + rbar * mass;
  t = 0.0;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) {
    const int64_t i = ids[j];
    if (i >= 0 && i < K) t += p[i] * dr_centred(r[j] / sigma, rbar, c, v);
  }
  const double s = cuda_detail::block_sum(t, sm);
  if (threadIdx.x == 0) {
    ws[nb] = den;
    ws[nb + 1] = rbar;
    ws[nb + 2] = rbar * s / (den * den);
    ws[nb + 3] = sigma;
  }
}

__global__ void dr_fill(int64_t K, const double* __restrict__ scal, double* __restrict__ grad,
                        double* __restrict__ estimate) {
  const double den = scal[0], rbar = scal[1], common = scal[2], sigma = scal[3];
  const double g = -rbar / den + common;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < K; i += stride) {
    grad[i] = g;
    if (estimate) estimate[i] = rbar * sigma;
  }
}

__global__ void dr_scatter(int64_t K, const int64_t* __restrict__ ids, const double* __restrict__ r,
                           int64_t m, double c, DrVariant v, const double* __restrict__ scal,
                           double* __restrict__ grad, double* __restrict__ estimate) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= m) return;
  const int64_t i = ids[j];
  if (i < 0 || i >= K) return;
  const double den = scal[0], rbar = scal[1], common = scal[2], sigma = scal[3];
  const double rhat = rbar + dr_centred(r[j] / sigma, rbar, c, v);
  grad[i] = -rhat / den + common;
  if (estimate) estimate[i] = rhat * sigma;
}

// One block does the whole O(m) lazy round. The weights softmax(-eta D_S) are shifted before
// scaling, as in fastfair/softmax.h: w = sign * D with sign = -sign(eta), exp(|eta| (w - max w)).
__global__ void dr_lazy(int64_t K, const int64_t* __restrict__ ids, const double* __restrict__ r,
                        int64_t m, double c, double eta, double prior_mass, DrVariant v,
                        double* __restrict__ D, double* __restrict__ q) {
  __shared__ double sm[kThreads];
  double sigma = 1.0, rbar = 0.0;
  scaled_mean(r, m, sm, &sigma, &rbar);
  const double den = 1.0 / sigma + rbar * prior_mass;
  const double sign = eta > 0.0 ? -1.0 : 1.0, abs_eta = fabs(eta);
  double top = -INFINITY;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) {
    const int64_t i = ids[j];
    if (i < 0 || i >= K) continue;
    const double d = D[i] - dr_centred(r[j] / sigma, rbar, c, v) / den;
    D[i] = d;
    top = fmax(top, sign * d);
  }
  top = cuda_detail::block_max(top, sm);
  double t = 0.0;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) {
    const int64_t i = ids[j];
    const double e = (i < 0 || i >= K) ? 0.0
                     : abs_eta == 0.0  ? 1.0
                                       : exp(abs_eta * (sign * D[i] - top));
    q[j] = e;
    t += e;
  }
  const double inv = 1.0 / cuda_detail::block_sum(t, sm);
  for (int64_t j = threadIdx.x; j < m; j += kThreads) q[j] *= inv;
}

}  // namespace

namespace cuda {

Status dr_gradient(const DrDenseArgs& a, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t K = a.num_clients;
  const int64_t nb = (K + kDrBlock - 1) / kDrBlock;
  mass_partials<<<unsigned(nb), kThreads, 0, stream>>>(a.p, K, a.workspace);
  Status st = cuda_detail::check(cudaGetLastError(), "dr_gradient mass kernel launch");
  if (!st.ok) return st;
  dr_scalars<<<1, kThreads, 0, stream>>>(a.p, K, a.ids, a.responses, a.m, a.sample_prob, a.variant,
                                         a.workspace, nb);
  st = cuda_detail::check(cudaGetLastError(), "dr_gradient scalars kernel launch");
  if (!st.ok) return st;
  const unsigned grid = unsigned(std::min<int64_t>((K + 8 * kThreads - 1) / (8 * kThreads), 65535));
  dr_fill<<<grid, kThreads, 0, stream>>>(K, a.workspace + nb, a.grad, a.estimate);
  st = cuda_detail::check(cudaGetLastError(), "dr_gradient fill kernel launch");
  if (!st.ok || a.m == 0) return st;
  dr_scatter<<<unsigned((a.m + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      K, a.ids, a.responses, a.m, a.sample_prob, a.variant, a.workspace + nb, a.grad, a.estimate);
  return cuda_detail::check(cudaGetLastError(), "dr_gradient scatter kernel launch");
}

Status dr_lazy_step(const DrLazyArgs& a, void* stream_ptr) {
  if (a.m == 0) return Status::success();
  dr_lazy<<<1, kThreads, 0, static_cast<cudaStream_t>(stream_ptr)>>>(
      a.num_clients, a.ids, a.responses, a.m, a.sample_prob, a.eta, a.prior_mass, a.variant,
      a.state, a.weights);
  return cuda_detail::check(cudaGetLastError(), "dr_lazy_step kernel launch");
}

}  // namespace cuda
}  // namespace fastfair
