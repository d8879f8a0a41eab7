// One thread per Philox counter: it draws the counter's four normals and updates the four
// elements they belong to (positions 16 k + lane of the counter's 64-element block), so sixteen
// neighbouring threads touch sixteen neighbouring elements for every k and a warp's accesses
// fill whole 32-byte sectors. Normals as on the CPU (sgld.h), with CUDA's logf / sincospif; they
// agree with the CPU to a few ulp, not bit for bit.
#include "cuda_utils.h"
#include "fastfair/sgld.h"

namespace fastfair {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void gauss4(uint64_t seed, uint64_t c, float z[4]) {
  const philox::U32x4 w = philox::draw(seed, 0, philox::kTagGaussian, c);
  const float r01 = sqrtf(-2.0f * logf(float(w.v[0] >> 8) * 0x1p-24f + 0x1p-25f));
  const float r23 = sqrtf(-2.0f * logf(float(w.v[2] >> 8) * 0x1p-24f + 0x1p-25f));
  float s1, c1, s3, c3;
  sincospif(2.0f * (float(w.v[1] >> 8) * 0x1p-24f), &s1, &c1);
  sincospif(2.0f * (float(w.v[3] >> 8) * 0x1p-24f), &s3, &c3);
  z[0] = r01 * c1;
  z[1] = r01 * s1;
  z[2] = r23 * c3;
  z[3] = r23 * s3;
}

__device__ __forceinline__ void gauss4(uint64_t seed, uint64_t c, double z[4]) {
  const philox::U32x4 w = philox::draw(seed, 0, philox::kTagGaussian, c);
  const double r01 = sqrt(-2.0 * log(double(w.v[0] >> 8) * 0x1p-24 + 0x1p-25));
  const double r23 = sqrt(-2.0 * log(double(w.v[2] >> 8) * 0x1p-24 + 0x1p-25));
  double s1, c1, s3, c3;
  sincospi(2.0 * (double(w.v[1] >> 8) * 0x1p-24), &s1, &c1);
  sincospi(2.0 * (double(w.v[3] >> 8) * 0x1p-24), &s3, &c3);
  z[0] = r01 * c1;
  z[1] = r01 * s1;
  z[2] = r23 * c3;
  z[3] = r23 * s3;
}

// The counters covering flat elements [0, total) at stream offset `offset`.
struct Cover {
  uint64_t first;   // first counter
  int64_t count;    // number of counters
};

Cover cover(uint64_t offset, int64_t total) {
  const uint64_t b0 = offset / kGaussBlock, b1 = (offset + uint64_t(total) - 1) / kGaussBlock;
  return {b0 * kGaussCounters, int64_t(b1 - b0 + 1) * kGaussCounters};
}

template <typename T>
__device__ __forceinline__ T langevin(T x, T g, T z, const LangevinArgs& u, int64_t row) {
  const T step = T(u.step_vec ? u.step_vec[row] : u.step);
  const T noise = T(u.noise_vec ? u.noise_vec[row] : u.noise);
  const T clip = T(u.grad_clip), lo = T(u.lo), hi = T(u.hi);
  g = g < -clip ? -clip : g;
  g = g > clip ? clip : g;
  T v = x - step * g + noise * z;
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}

__device__ __forceinline__ int64_t row_of(int64_t i, int64_t cols, bool needed) {
  if (!needed) return 0;
  // 32-bit division where it is exact: the common case, and far cheaper than 64-bit.
  if (i < (int64_t(1) << 32) && cols < (int64_t(1) << 32)) return int64_t(uint32_t(i) / uint32_t(cols));
  return i / cols;
}

// Calls f(flat index, z) for the (up to four) elements of counter `c` that lie in [0, total).
template <typename T, typename F>
__device__ __forceinline__ void for_counter(const LangevinArgs& u, bool noisy, int64_t total,
                                            uint64_t c, F&& f) {
  T z[4] = {T(0), T(0), T(0), T(0)};
  if (noisy) gauss4(u.seed, c, z);
  const uint64_t base = (c / kGaussCounters) * kGaussBlock + c % kGaussCounters;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint64_t g = base + uint64_t(k) * kGaussCounters;
    if (g < u.offset || g - u.offset >= uint64_t(total)) continue;
    f(int64_t(g - u.offset), z[k]);
  }
}

template <typename T>
__global__ void sgld_kernel(SgldArgs a, int64_t total, Cover cv, bool noisy) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= cv.count) return;
  const T* __restrict__ x = static_cast<const T*>(a.x);
  const T* __restrict__ grad = static_cast<const T*>(a.grad);
  T* out = static_cast<T*>(a.out);
  const bool per_row = a.u.step_vec || a.u.noise_vec;
  for_counter<T>(a.u, noisy, total, cv.first + uint64_t(t), [&](int64_t i, T z) {
    out[i] = langevin(x[i], grad[i], z, a.u, row_of(i, a.cols, per_row));
  });
}

template <typename T>
__global__ void fedevg_kernel(FedEvgServerArgs a, int64_t total, Cover cv, bool noisy) {
  using Acc = typename Storage<T>::acc;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= cv.count) return;
  const T* __restrict__ x = static_cast<const T*>(a.x);
  const T* __restrict__ G = static_cast<const T*>(a.G);
  T* out = static_cast<T*>(a.out);
  const int64_t M = a.rows, D = a.cols;
  for_counter<T>(a.u, noisy, total, cv.first + uint64_t(t), [&](int64_t i, T z) {
    const int64_t j = row_of(i, D, true), d = i - j * D;
    double den = 0.0;
    Acc num = Acc(0);
    for (int64_t c = 0; c < a.clients; ++c) {
      const double we = a.weight[c] * a.energy[c * M + j];
      den += we;
      num += Acc(we) * G[(c * M + j) * D + d];
    }
    out[i] = langevin(x[i], T(num / Acc(den)), z, a.u, j);
  });
}

bool noisy(const LangevinArgs& u) { return u.noise_vec != nullptr || u.noise != 0.0; }

unsigned blocks(int64_t threads) { return unsigned((threads + kThreads - 1) / kThreads); }

}  // namespace

namespace cuda {

Status sgld_step(const SgldArgs& a, void* stream_ptr) {
  const int64_t total = a.rows * a.cols;
  if (total == 0) return Status::success();
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const Cover cv = cover(a.u.offset, total);
  if (a.dtype == DType::f64)
    sgld_kernel<double><<<blocks(cv.count), kThreads, 0, stream>>>(a, total, cv, noisy(a.u));
  else
    sgld_kernel<float><<<blocks(cv.count), kThreads, 0, stream>>>(a, total, cv, noisy(a.u));
  return cuda_detail::check(cudaGetLastError(), "sgld_step kernel launch");
}

Status fedevg_server_step(const FedEvgServerArgs& a, void* stream_ptr) {
  const int64_t total = a.rows * a.cols;
  if (total == 0) return Status::success();
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const Cover cv = cover(a.u.offset, total);
  if (a.dtype == DType::f64)
    fedevg_kernel<double><<<blocks(cv.count), kThreads, 0, stream>>>(a, total, cv, noisy(a.u));
  else
    fedevg_kernel<float><<<blocks(cv.count), kThreads, 0, stream>>>(a, total, cv, noisy(a.u));
  return cuda_detail::check(cudaGetLastError(), "fedevg_server_step kernel launch");
}

}  // namespace cuda
}  // namespace fastfair
