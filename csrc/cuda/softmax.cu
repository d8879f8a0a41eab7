#include <cstdint>
#include <limits>
#include <type_traits>

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

// Pass 1 folds one element w into a thread's (top, sum) pair; a NaN or +inf makes the pair NaN
// at the end of the block, which poisons the row.
template <typename T>
__device__ inline void fold(T w, double abs_s, T c, MaxSum& acc, bool& bad) {
  if (w != w || w == T(INFINITY)) bad = true;
  if (w == T(-INFINITY)) return;
  if (double(w) > acc.max) {
    // The first element of a pair has nothing to rescale (and |s| = 0 would make 0 * -inf NaN).
    acc.sum = acc.max == -INFINITY ? 1.0 : acc.sum * exp(abs_s * (acc.max - double(w))) + 1.0;
    acc.max = double(w);
  } else {
    acc.sum += double(exp_t(T((w - T(acc.max)) * c)));
  }
}

// Folds the n elements w[0..n): the top moves once, to their largest, and their exponentials are
// summed in T before one add to the double sum (the per-element compare, branch and conversion
// of fold() left pass 1 arithmetic-bound at 2.5x the read time of 10^8 floats on an H200).
template <typename T, int n>
__device__ inline void fold_many(const T (&w)[n], double abs_s, T c, MaxSum& acc, bool& bad) {
  T top = w[0];
#pragma unroll
  for (int q = 0; q < n; ++q) {
    if (w[q] != w[q] || w[q] == T(INFINITY)) bad = true;
    top = w[q] > top ? w[q] : top;
  }
  if (top == T(-INFINITY) || top != top) return;  // all -inf (nothing to add), or a NaN (bad)
  if (double(top) > acc.max) {
    acc.sum = acc.max == -INFINITY ? 0.0 : acc.sum * exp(abs_s * (acc.max - double(top)));
    acc.max = double(top);
  }
  const T t = T(acc.max);
  T sum = T(0);
#pragma unroll
  for (int q = 0; q < n; ++q)  // -inf adds nothing, also where c underflowed to 0 (-inf * 0)
    sum += w[q] == T(-INFINITY) ? T(0) : exp_t(T((w[q] - t) * c));
  acc.sum += double(sum);
}

// 16-byte vectors of T: pass 1 reads a full block of an aligned row, and pass 2 a row whose input
// and output are aligned and of one type, with them (one load instruction for 4 floats or 2
// doubles, so that enough bytes are in flight to reach the memory's bandwidth).
template <typename T>
struct Vec16;
template <>
struct Vec16<float> {
  using type = float4;
  static constexpr int n = 4;
};
template <>
struct Vec16<double> {
  using type = double2;
  static constexpr int n = 2;
};

inline __device__ bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Threads of a pass-1 block, and the vector loads each thread issues before it folds them. A
// block of 512 threads fills 4 slots of a multiprocessor's 2048 threads, so the ~1,500 blocks of a
// row of 10^8 elements run in about 3 waves of a 132-multiprocessor GPU (2 waves of 256-thread
// blocks left the second one half empty).
constexpr int kPartialThreads = 512;
constexpr int kLoadsInFlight = 4;
static_assert(kSoftmaxBlock % (4 * kLoadsInFlight * kPartialThreads) == 0,
              "a full block is whole rounds of vector loads");

// Pass 1: block (k, b) folds elements [k * kSoftmaxBlock, ...) of row b into one (top, sum) pair.
template <typename T>
__global__ void __launch_bounds__(kPartialThreads)
softmax_partials(const T* __restrict__ x, int64_t x_stride, const T* __restrict__ add,
                 int64_t add_stride, RowScales scale, int64_t cols, double* __restrict__ ws) {
  __shared__ double smax[kPartialThreads], ssum[kPartialThreads];
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
  if (!ar && end - begin == kSoftmaxBlock && aligned16(xr + begin)) {
    using V = typename Vec16<T>::type;
    constexpr int n = Vec16<T>::n;
    constexpr int64_t vectors = kSoftmaxBlock / n;
    const V* v = reinterpret_cast<const V*>(xr + begin);
    for (int64_t j = threadIdx.x; j < vectors; j += kLoadsInFlight * kPartialThreads) {
      V r[kLoadsInFlight];
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) r[u] = v[j + u * kPartialThreads];
      T w[kLoadsInFlight * n];
#pragma unroll
      for (int u = 0; u < kLoadsInFlight; ++u) {
        const T* e = reinterpret_cast<const T*>(&r[u]);
#pragma unroll
        for (int q = 0; q < n; ++q) w[u * n + q] = sign * e[q];
      }
      fold_many(w, abs_s, c, acc, bad);
    }
  } else {
    for (int64_t i = begin + threadIdx.x; i < end; i += kPartialThreads)
      fold(w_of(xr, ar, i, sign), abs_s, c, acc, bad);
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
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;  // elements [0, done) written by the vector loop
  if constexpr (std::is_same<T, To>::value) {
    if (!ar && o && aligned16(xr) && aligned16(o)) {
      using V = typename Vec16<T>::type;
      constexpr int n = Vec16<T>::n;
      const V* xv = reinterpret_cast<const V*>(xr);
      V* ov = reinterpret_cast<V*>(o);
      const int64_t vectors = cols / n;
      for (int64_t j = first; j < vectors; j += stride) {
        V r = xv[j];
        T* e = reinterpret_cast<T*>(&r);
#pragma unroll
        for (int q = 0; q < n; ++q) e[q] = exp_t(T((sign * e[q] - top) * c)) * inv;
        ov[j] = r;
      }
      done = vectors * n;
    }
  }
  for (int64_t i = done + first; i < cols; i += stride) {
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
  softmax_partials<T><<<dim3(unsigned(nb), unsigned(a.rows)), kPartialThreads, 0, stream>>>(
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
