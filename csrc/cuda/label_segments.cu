// One thread per row, as the CPU's per-row loop (csrc/cpu/simd/label_segments.cpp): a thread finds
// its segment by a binary search of offsets, transforms its row in place (float32 _rn intrinsics)
// and accumulates the logits in float64 in the header's order with _rn intrinsics (no FMA
// contraction), so the bits equal the CPU's. offsets are read as given: a segment that does not
// lie inside [0, N) is skipped.
#include <algorithm>

#include "cuda_utils.h"
#include "fastfair/label_segments.h"

namespace fastfair {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 16;  // further rows: grid-stride

__global__ void label_segments_kernel(LabelSegmentsArgs a) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t F = a.features, C = a.classes;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < a.rows; r += stride) {
    int64_t lo = 0, hi = a.segments - 1;  // the last segment starting at or before r
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (__ldg(a.offsets + mid) <= r) lo = mid; else hi = mid - 1;
    }
    const int64_t begin = __ldg(a.offsets + lo), end = __ldg(a.offsets + lo + 1);
    if (begin < 0 || end > a.rows || r < begin || r >= end) continue;
    float* x = a.x + r * F;
    if (a.scale != nullptr) {
      const float* shift = a.shift + lo * F;
      for (int64_t f = 0; f < F; ++f)
        x[f] = __fadd_rn(__fmul_rn(x[f], __ldg(a.scale + f)), __ldg(shift + f));
    }
    const float* W = a.W + lo * F * C;
    const float* b = a.b + lo * C;
    int64_t best = 0;
    double best_value = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      double acc = double(__ldg(b + c));
      for (int64_t f = 0; f < F; ++f)
        acc = __dadd_rn(acc, __dmul_rn(double(x[f]), double(__ldg(W + f * C + c))));
      if (c == 0 || acc > best_value) {
        best = c;
        best_value = acc;
      }
    }
    a.y[r] = best;
  }
}

}  // namespace

namespace cuda {

Status label_segments(const LabelSegmentsArgs& a, void* stream_ptr) {
  if (a.segments == 0 || a.rows == 0) return Status::success();
  const unsigned grid = unsigned(std::min((a.rows + kThreads - 1) / kThreads, kMaxBlocks));
  label_segments_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream_ptr)>>>(a);
  return cuda_detail::check(cudaGetLastError(), "label_segments kernel launch");
}

}  // namespace cuda
}  // namespace fastfair
