// Weighted parameter averaging over N clients and L parameter segments, in one multi-tensor pass.
//
//   acc_l[j] = sum_i w[i] * X_{i,l}[j]          (accumulated in float, or double for float64)
//   mode write:       out_l[j]  = acc_l[j]                 (out has the storage dtype)
//   mode accumulate:  out_l[j] += acc_l[j]                 (out has the accumulator dtype)
//   mode server_step: out_l[j]  = out_l[j] - lr * acc_l[j] (out is the base, storage dtype)
//
// Summation order is fixed by (N, segment lengths) alone, so results do not depend on the
// number of OpenMP threads.
#pragma once

#include <cstdint>

#include "fastfair/common.h"

namespace fastfair {

enum class AverageMode : int { write = 0, accumulate = 1, server_step = 2 };

struct AverageArgs {
  DType dtype;                    // storage dtype of the inputs
  int64_t num_clients;            // N >= 1
  int64_t num_segments;           // L >= 1
  const int64_t* segment_len;     // [L] elements per segment
  const void* const* inputs;      // [N * L] client i, segment l at inputs[i * L + l]
  const double* weights;          // [N] (device memory for CUDA)
  void* const* outputs;           // [L] contiguous output segments
  AverageMode mode;
  double lr;                      // server_step only
};

namespace cpu {
Status weighted_average(const AverageArgs& args);
}

namespace cuda {
// Pointer tables (inputs, outputs, segment_len) are host memory; data and weights are device memory.
Status weighted_average(const AverageArgs& args, void* stream);
}

}  // namespace fastfair
