// Log-sum-exp and softmax over the rows of a [B, K] array, fused with the exponentiated-gradient
// (EG / FTRL with entropic regulariser) state update.
//
//   per row b:   x_b <- x_b + add_b                  (only when `add` is given; x is the state)
//                z_b  = scale_b * x_b
//                lse_b = log sum_k exp(z_bk)          (float64 accumulation)
//                out_b = exp(z_b - lse_b)             (only when `out` is given)
//
// z is never formed in the storage precision: with w = sign(s) x (exact) and top = max w, the
// exponents are |s| (w - top) <= 0, the difference taken before the scale (so no fused
// multiply-add can shift them), and lse = |s| top + log(sum) in float64; rows whose s x overflows
// float32 are fine.
//
// Two passes over x: pass 1 reads x (and add) once, keeping an online (top, sum) per block of the
// row; pass 2 reads x (and add) again and writes out (and the new x). Blocks are fixed by K alone
// and combined in block order, so results do not depend on the thread count. The state x is
// written only in pass 2, after the row is known to be valid, so a call that fails leaves x as it
// was.
//
// Invalid rows (CPU: a Status error; CUDA: NaN in lse and out, since inspecting would synchronise):
// a NaN in z, a +inf in z, or every z = -inf.
#pragma once

#include <cstdint>

#include "fastfair/common.h"

namespace fastfair {

struct SoftmaxArgs {
  DType x_dtype;             // float32 or float64: x and add
  DType out_dtype;           // float32 or float64: out
  int64_t rows, cols;        // B >= 1, K >= 1
  void* x;                   // [B, K], row stride x_stride elements; written only if add != null
  int64_t x_stride;
  const void* add;           // optional [B, K], row stride add_stride
  int64_t add_stride;
  const double* scale;       // [B] host memory (both backends)
  void* out;                 // optional [B, K] contiguous
  double* lse;               // [B] (device memory for CUDA)
  double* workspace;         // CUDA only: softmax_workspace_len(B, K) doubles of device memory
  const char* z_name;        // CPU errors call z this (the caller's expression); null: "scale * x"
};

// Elements of a row handled by one block of pass 1 (CPU and CUDA use the same split).
constexpr int64_t kSoftmaxBlock = int64_t(1) << 16;

inline int64_t softmax_blocks(int64_t cols) { return (cols + kSoftmaxBlock - 1) / kSoftmaxBlock; }
// Per row: (max, sum) of each block, then (max, 1 / sum) of the row.
inline int64_t softmax_workspace_len(int64_t rows, int64_t cols) {
  return 2 * rows * softmax_blocks(cols) + 2 * rows;
}

// The EG step with a sparse gradient, on a float64 state x with contiguous rows
// (x_stride == cols, add == null):
//
//   per row b:   x[b, ids[b, j]] += values[b, j]   for j < m
//   then softmax(args) of the updated state (lse, and out when given).
//
// ids and values are [B, m], C-contiguous. On the CPU the ids of a row are distinct and in
// [0, cols) and the values finite (the caller validates them), and a softmax that fails restores
// every entry the scatter changed: a call that fails leaves x exactly as it was. CUDA ids are not
// inspected (that would synchronise): ids out of range are skipped, repeated ids race.
struct SparseGradient {
  const int64_t* ids;     // [B, m]
  const double* values;   // [B, m]
  int64_t m;
};

namespace cpu {
Status softmax(const SoftmaxArgs& args);
Status eg_sparse_step(const SoftmaxArgs& args, const SparseGradient& g);
}  // namespace cpu

namespace cuda {
Status softmax(const SoftmaxArgs& args, void* stream);
Status eg_sparse_step(const SoftmaxArgs& args, const SparseGradient& g, void* stream);
}  // namespace cuda

}  // namespace fastfair
