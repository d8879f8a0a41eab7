// Labels of ragged segments of feature rows, each segment through its own affine model, with an
// optional per-segment feature transform applied in place first:
//
//   x[r, f] <- x[r, f] * scale[f] + shift[i, f]         (float32, each product and sum rounded)
//   y[r] = argmax_c  b[i, c] + sum_f x[r, f] W[i, f, c]  for rows r in [offsets[i], offsets[i + 1])
//
// The logits are accumulated in float64 in a fixed order, acc_c = b[i, c], then for f = 0 .. F-1
// acc_c = acc_c + x[r, f] * W[i, f, c] (product and sum each rounded, no fused multiply-add), and
// the argmax takes the first of equal maxima. CPU (every ISA copy, any thread count), CUDA and the
// NumPy reference (fastfair.reference.label_segments) give the same bits. Segments of length 0
// are allowed; rows are independent, so a row's label depends only on its own segment's model.
#pragma once

#include <cstdint>

#include "fastfair/common.h"

namespace fastfair {

struct LabelSegmentsArgs {
  int64_t segments;        // m >= 0
  int64_t rows;            // N
  int64_t features;        // F >= 1
  int64_t classes;         // C >= 1
  const int64_t* offsets;  // [m + 1] rows, offsets[0] = 0, non-decreasing, offsets[m] = N
  float* x;                // [N, F] C-contiguous; transformed in place when scale is set
  const float* scale;      // [F] or null (no transform)
  const float* shift;      // [m, F] (with scale) or null
  const float* W;          // [m, F, C] C-contiguous
  const float* b;          // [m, C] C-contiguous
  int64_t* y;              // [N] labels in [0, C)
};

namespace cpu {
Status label_segments(const LabelSegmentsArgs& args);
}  // namespace cpu

namespace cuda {
// offsets are not inspected on the device; a segment outside [0, N) is skipped.
Status label_segments(const LabelSegmentsArgs& args, void* stream);
}  // namespace cuda

}  // namespace fastfair
