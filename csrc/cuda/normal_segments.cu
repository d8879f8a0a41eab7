// One thread per slot, as on the CPU (csrc/cpu/simd/normal_segments.cpp): segment i owns slots
// [C_i, C_i + ceil(len_i / 4)) with C_i = offsets[i] / 4 + i, so a grid-stride loop over the
// N / 4 + m slots draws every Philox counter exactly once, whatever the segment lengths; a thread
// finds its segment by a binary search of C and writes the (up to) four consecutive elements of
// its counter. The formulas of normal_segments.h (double for float64 output, float for float32)
// run on CUDA's _rn intrinsics (no FMA contraction) and correctly rounded square roots, so the
// bits equal the CPU's. offsets are read as given:
// a segment that does not lie inside out is skipped rather than written out of bounds.
#include <algorithm>

#include "cuda_utils.h"
#include "fastfair/normal_segments.h"

namespace fastfair {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 16;  // further slots: grid-stride

__device__ __forceinline__ int64_t slot_of(const int64_t* __restrict__ off, int64_t i) {
  return __ldg(off + i) / 4 + i;
}

// The four normals of a counter's words: the double formulas of normal_segments.h ...
__device__ __forceinline__ void four_normals(const philox::U32x4& w, double* z) {
  using normal::log_uniform;
  const double r0 = __dsqrt_rn(normal::mul(-2.0, log_uniform<double, uint64_t>(double(w.v[0]))));
  const double r2 = __dsqrt_rn(normal::mul(-2.0, log_uniform<double, uint64_t>(double(w.v[2]))));
  double c1, s1, c3, s3;
  normal::cos_sin_turn(double(w.v[1]), c1, s1);
  normal::cos_sin_turn(double(w.v[3]), c3, s3);
  z[0] = normal::mul(r0, c1);
  z[1] = normal::mul(r0, s1);
  z[2] = normal::mul(r2, c3);
  z[3] = normal::mul(r2, s3);
}

// ... or its float formulas.
__device__ __forceinline__ void four_normals(const philox::U32x4& w, float* z) {
  using normal32::mul;
  const float r0 = __fsqrt_rn(mul(-2.0f, normal32::log_uniform<float, uint32_t, int32_t>(w.v[0])));
  const float r2 = __fsqrt_rn(mul(-2.0f, normal32::log_uniform<float, uint32_t, int32_t>(w.v[2])));
  float c1, s1, c3, s3;
  normal32::cos_sin_turn<float, uint32_t, int32_t>(w.v[1], c1, s1);
  normal32::cos_sin_turn<float, uint32_t, int32_t>(w.v[3], c3, s3);
  z[0] = mul(r0, c1);
  z[1] = mul(r0, s1);
  z[2] = mul(r2, c3);
  z[3] = mul(r2, s3);
}

template <typename T>
__global__ void normal_segments_kernel(const uint64_t* __restrict__ keys,
                                       const int64_t* __restrict__ off, int64_t m, int64_t total,
                                       int64_t slots, T* __restrict__ out) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < slots; t += stride) {
    int64_t lo = 0, hi = m - 1;  // the last segment whose slots start at or before t
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (slot_of(off, mid) <= t) lo = mid; else hi = mid - 1;
    }
    const int64_t c = t - slot_of(off, lo);
    const int64_t begin = __ldg(off + lo), end = __ldg(off + lo + 1);
    if (begin < 0 || end > total || 4 * c >= end - begin) continue;
    const philox::U32x4 w = philox::draw(__ldg(keys + lo), 0, philox::kTagNormal, uint64_t(c));
    T z[4];
    four_normals(w, z);
    T* dst = out + begin + 4 * c;
    const int64_t n = end - begin - 4 * c;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (k < n) dst[k] = z[k];
  }
}

}  // namespace

namespace cuda {

Status normal_segments(const NormalSegmentsArgs& a, void* stream_ptr) {
  if (a.segments == 0 || a.total == 0) return Status::success();
  const int64_t slots = a.total / 4 + a.segments;
  const unsigned grid = unsigned(std::min((slots + kThreads - 1) / kThreads, kMaxBlocks));
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  if (a.dtype == DType::f64)
    normal_segments_kernel<double><<<grid, kThreads, 0, stream>>>(
        a.keys, a.offsets, a.segments, a.total, slots, static_cast<double*>(a.out));
  else
    normal_segments_kernel<float><<<grid, kThreads, 0, stream>>>(
        a.keys, a.offsets, a.segments, a.total, slots, static_cast<float*>(a.out));
  return cuda_detail::check(cudaGetLastError(), "normal_segments kernel launch");
}

}  // namespace cuda
}  // namespace fastfair
