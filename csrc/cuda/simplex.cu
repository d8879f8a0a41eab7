#include "cuda_utils.h"
#include "fastfair/simplex.h"
#include "reduce.cuh"

namespace fastfair {
namespace {

constexpr int kThreads = 512;

// One block per row. tau starts at a lower bound of the root, max(max v - 1, (sum v - 1) / K), and
// Michelot's step tau <- (sum_{v > tau} v - 1) / #{v > tau} raises it monotonically (Newton on a
// convex decreasing function from the left) until the support stops shrinking.
template <typename T>
__global__ void project_rows(const T* __restrict__ v, int64_t stride, int64_t K, T* __restrict__ out) {
  __shared__ double sm[kThreads];
  const T* row = v + int64_t(blockIdx.x) * stride;
  // Work on y - max y (shift invariance): tau and y - tau stay exact for any magnitude.
  double mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < K; i += kThreads) mx = fmax(mx, double(row[i]));
  mx = cuda_detail::block_max(mx, sm);
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < K; i += kThreads) sum += double(row[i]) - mx;
  sum = cuda_detail::block_sum(sum, sm);
  double tau = fmax(-1.0, (sum - 1.0) / double(K));
  // A non-finite entry makes sum non-finite; the row comes out NaN.
  if (!isfinite(sum)) tau = NAN;
  double prev = double(K) + 1.0;
  while (isfinite(tau)) {
    double cnt = 0.0, s = 0.0;
    for (int64_t i = threadIdx.x; i < K; i += kThreads) {
      const double y = double(row[i]) - mx;
      if (y > tau) {
        cnt += 1.0;
        s += y;
      }
    }
    cnt = cuda_detail::block_sum(cnt, sm);
    s = cuda_detail::block_sum(s, sm);
    if (cnt >= prev) break;  // the support is stable: tau is its root
    prev = cnt;
    tau = (s - 1.0) / cnt;
  }
  T* o = out + int64_t(blockIdx.x) * K;
  for (int64_t i = threadIdx.x; i < K; i += kThreads) {
    const double d = (double(row[i]) - mx) - tau;
    o[i] = T(d > 0.0 ? d : (isnan(d) ? d : 0.0));
  }
}

}  // namespace

namespace cuda {

Status project_simplex(const SimplexArgs& a, void* stream_ptr) {
  if (a.rows > 0x7fffffff) return Status::error("CUDA project_simplex supports < 2^31 rows");
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (a.dtype == DType::f64)
    project_rows<double><<<unsigned(a.rows), kThreads, 0, stream>>>(
        static_cast<const double*>(a.v), a.v_stride, a.cols, static_cast<double*>(a.out));
  else
    project_rows<float><<<unsigned(a.rows), kThreads, 0, stream>>>(
        static_cast<const float*>(a.v), a.v_stride, a.cols, static_cast<float*>(a.out));
  return cuda_detail::check(cudaGetLastError(), "project_simplex kernel launch");
}

}  // namespace cuda
}  // namespace fastfair
