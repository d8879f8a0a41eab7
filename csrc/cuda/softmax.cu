#include <limits>

#include "cuda_utils.h"
#include "fastfair/softmax.h"
#include "reduce.cuh"

namespace fastfair {
namespace {

using cuda_detail::MaxSum;

constexpr int kThreads = 256;
constexpr int kInlineRows = 4;

// Per-row scales: up to kInlineRows travel in the kernel parameters (the usual one-row call needs
// no table and no copy), more in a stream-ordered device table.
struct RowScales {
  const double* table;
  double inline_rows[kInlineRows];
  __device__ double operator[](int64_t b) const {
    if (table != nullptr) return table[b];
    // A select chain rather than a dynamic index, which would copy the parameters to local memory.
    return b == 0 ? inline_rows[0] : b == 1 ? inline_rows[1] : b == 2 ? inline_rows[2]
                                                                      : inline_rows[3];
  }
};

__device__ inline float exp_t(float x) { return expf(x); }
__device__ inline double exp_t(double x) { return exp(x); }

// As on the CPU (csrc/cpu/simd/softmax.cpp), z = s * v is never formed: with w = sign(s) * v
// (exact) and top = max w, every exponent is |s| (w - top) <= 0 with the difference taken before
// the scale, which no FMA contraction can turn positive; lse = |s| top + log(sum).
template <typename T>
__device__ inline T w_of(const T* x, const T* add, int64_t i, T sign) {
  return add ? sign * (x[i] + add[i]) : sign * x[i];
}

template <typename T>
__device__ inline T sign_of(double s) {
  return s > 0.0 ? T(1) : s < 0.0 ? T(-1) : T(0);  // 0: w = 0 * v is 0 or NaN, like z
}

// Pass 1: block (k, b) folds elements [k * kSoftmaxBlock, ...) of row b into one (top, sum) pair.
// A NaN or +inf z makes the pair NaN, which poisons the row.
template <typename T>
__global__ void softmax_partials(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ add,
                                 int64_t add_stride, RowScales scale, int64_t cols,
                                 double* __restrict__ ws) {
  __shared__ double smax[kThreads], ssum[kThreads];
  const int64_t b = blockIdx.y, k = blockIdx.x, nb = gridDim.x;
  const T* xr = x + b * x_stride;
  const T* ar = add ? add + b * add_stride : nullptr;
  const T sign = sign_of<T>(scale[b]);
  const double abs_s = fabs(scale[b]);
  const T c = T(fmin(abs_s, double(std::numeric_limits<T>::max())));
  const int64_t begin = k * kSoftmaxBlock;
  const int64_t end = min(cols, begin + kSoftmaxBlock);
  MaxSum acc{-INFINITY, 0.0};
  bool bad = false;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const T w = w_of(xr, ar, i, sign);
    if (w != w || w == T(INFINITY)) bad = true;
    if (w == T(-INFINITY)) continue;
    if (double(w) > acc.max) {
      acc.sum = acc.sum * exp(abs_s * (acc.max - double(w))) + 1.0;
      acc.max = double(w);
    } else {
      acc.sum += double(exp_t(T((w - T(acc.max)) * c)));
    }
  }
  if (bad) acc = {NAN, NAN};
  const MaxSum r = cuda_detail::block_combine(acc, abs_s, smax, ssum);
  if (threadIdx.x == 0) {
    ws[2 * (b * nb + k)] = r.max;
    ws[2 * (b * nb + k) + 1] = r.sum;
  }
}

// One block per row combines the row's pairs in block order: lse, and (top, 1 / sum) for pass 2.
__global__ void softmax_rows(const double* __restrict__ ws, int64_t nb, RowScales scale,
                             double* __restrict__ lse, double* __restrict__ row_out) {
  __shared__ double smax[kThreads], ssum[kThreads];
  const int64_t b = blockIdx.x;
  const double abs_s = fabs(scale[b]);
  MaxSum acc{-INFINITY, 0.0};
  // Thread t folds pairs t, t + kThreads, ... in order; the tree then fixes the rest of the order.
  for (int64_t k = threadIdx.x; k < nb; k += kThreads)
    acc = cuda_detail::combine(acc, {ws[2 * (b * nb + k)], ws[2 * (b * nb + k) + 1]}, abs_s);
  const MaxSum r = cuda_detail::block_combine(acc, abs_s, smax, ssum);
  if (threadIdx.x == 0) {
    // All -inf (max stays -inf) or invalid (NaN): the softmax is undefined.
    const bool ok = r.max > -INFINITY && !isnan(r.max);
    lse[b] = ok ? abs_s * r.max + log(r.sum) : NAN;
    row_out[2 * b] = ok ? r.max : NAN;
    row_out[2 * b + 1] = ok ? 1.0 / r.sum : NAN;
  }
}

template <typename T, typename To>
__global__ void softmax_write(T* __restrict__ x, int64_t x_stride, const T* __restrict__ add,
                              int64_t add_stride, RowScales scale, int64_t cols,
                              const double* __restrict__ row_stat, To* __restrict__ out) {
  const int64_t b = blockIdx.y;
  T* xr = x + b * x_stride;
  const T* ar = add ? add + b * add_stride : nullptr;
  const T sign = sign_of<T>(scale[b]);
  const T c = T(fmin(fabs(scale[b]), double(std::numeric_limits<T>::max())));
  const T top = T(row_stat[2 * b]);
  const T inv = T(row_stat[2 * b + 1]);
  To* o = out ? out + b * cols : nullptr;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < cols; i += stride) {
    T v = xr[i];
    if (ar) {
      v += ar[i];
      xr[i] = v;
    }
    if (o) o[i] = To(exp_t(T((sign * v - top) * c)) * inv);
  }
}

template <typename T, typename To>
Status launch(const SoftmaxArgs& a, const RowScales& scale, cudaStream_t stream) {
  const int64_t nb = softmax_blocks(a.cols);
  double* pairs = a.workspace;
  double* row_stat = a.workspace + 2 * a.rows * nb;
  T* x = static_cast<T*>(a.x);
  const T* add = static_cast<const T*>(a.add);
  softmax_partials<T><<<dim3(unsigned(nb), unsigned(a.rows)), kThreads, 0, stream>>>(
      x, a.x_stride, add, a.add_stride, scale, a.cols, pairs);
  Status st = cuda_detail::check(cudaGetLastError(), "softmax partials kernel launch");
  if (!st.ok) return st;
  softmax_rows<<<unsigned(a.rows), kThreads, 0, stream>>>(pairs, nb, scale, a.lse, row_stat);
  st = cuda_detail::check(cudaGetLastError(), "softmax rows kernel launch");
  if (!st.ok || (!a.out && !a.add)) return st;
  // Enough blocks to cover the row up to 8 elements per thread, at most 65535 per row.
  const int64_t per_block = int64_t(kThreads) * 8;
  const unsigned gx = unsigned(std::min<int64_t>((a.cols + per_block - 1) / per_block, 65535));
  softmax_write<T, To><<<dim3(gx, unsigned(a.rows)), kThreads, 0, stream>>>(
      x, a.x_stride, add, a.add_stride, scale, a.cols, row_stat, static_cast<To*>(a.out));
  return cuda_detail::check(cudaGetLastError(), "softmax write kernel launch");
}

}  // namespace

namespace cuda {

Status softmax(const SoftmaxArgs& a, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (a.rows > 65535) return Status::error("CUDA softmax supports at most 65535 rows per call");
  auto& ring = cuda_detail::table_ring();
  cuda_detail::HostTableRing::Lease lease;
  RowScales scale{};
  Status st = Status::success();
  if (a.rows <= kInlineRows) {
    for (int64_t b = 0; b < a.rows; ++b) scale.inline_rows[b] = a.scale[b];
  } else {
    st = ring.stage({{a.scale, size_t(a.rows) * sizeof(double)}}, stream, &lease);
    if (!st.ok) return st;
    scale.table = static_cast<const double*>(lease.parts[0]);
  }
  if (a.x_dtype == DType::f64)
    st = a.out_dtype == DType::f32 ? launch<double, float>(a, scale, stream)
                                   : launch<double, double>(a, scale, stream);
  else
    st = a.out_dtype == DType::f64 ? launch<float, double>(a, scale, stream)
                                   : launch<float, float>(a, scale, stream);
  Status released = ring.release(lease, stream);
  return st.ok ? released : st;
}

namespace {
// x[b, ids[b, j]] += values[b, j] over the [B, m] sparse gradient, one thread per entry.
__global__ void scatter_add_kernel(double* x, int64_t cols, const int64_t* ids,
                                   const double* values, int64_t m, int64_t n) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const int64_t i = ids[t];
  if (i >= 0 && i < cols) x[(t / m) * cols + i] += values[t];
}
}  // namespace

Status eg_sparse_step(const SoftmaxArgs& a, const SparseGradient& g, void* stream) {
  const int64_t n = a.rows * g.m;
  if (n > 0) {
    const unsigned grid = unsigned((n + kThreads - 1) / kThreads);
    scatter_add_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
        static_cast<double*>(a.x), a.cols, g.ids, g.values, g.m, n);
    Status st = cuda_detail::check(cudaGetLastError(), "scatter_add kernel launch");
    if (!st.ok) return st;
  }
  return softmax(a, stream);
}

}  // namespace cuda
}  // namespace fastfair
