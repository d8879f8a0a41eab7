// Euclidean projection of each row of a [B, K] array onto the probability simplex:
//
//   proj(v) = argmin_{p >= 0, sum p = 1} ||p - v||_2  =  max(v - tau, 0),
//   tau the unique root of sum_i max(v_i - tau, 0) = 1.
//
// CPU: Condat's algorithm (Math. Program. 2016), expected O(K) without sorting, then tau is
// recomputed in float64 from the support it found, tau = (sum_{i in support} v_i - 1) / |support|.
// Both backends work on v - max(v) (the projection is shift invariant), which keeps v - tau exact
// for entries of any magnitude.
// CUDA: one thread block per row runs Michelot's fixed point from a lower bound of tau
// (Newton's method on the convex, decreasing, piecewise-linear function above), which ends with
// the same support formula. Arithmetic is float64 for float32 and float64 inputs.
#pragma once

#include <cstdint>

#include "fastfair/common.h"

namespace fastfair {

struct SimplexArgs {
  DType dtype;          // float32 or float64: v and out
  int64_t rows, cols;   // B >= 1, K >= 1
  const void* v;        // [B, K], row stride v_stride elements
  int64_t v_stride;
  void* out;            // [B, K] contiguous
};

namespace cpu {
// Rejects non-finite entries (a Status naming the position).
Status project_simplex(const SimplexArgs& args);
// One float64 row [K] by the same algorithm, on the calling thread and without allocating (aux:
// K doubles of scratch), for kernels that project inside their own loops (FISTA of fastfair/ons.h).
// Rejects non-finite entries like project_simplex; out is then untouched.
Status project_simplex_row(const double* v, int64_t K, double* aux, double* out);
}

namespace cuda {
// Non-finite entries give NaN rows (inspecting them would synchronise).
Status project_simplex(const SimplexArgs& args, void* stream);
}

}  // namespace fastfair
