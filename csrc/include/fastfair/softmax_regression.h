// Local training of a cohort of multinomial logistic-regression models, each client on its own
// rows, in one pass: the simulator's local minibatch SGD for its default model, with every step of
// a client run while the client's rows and model sit in the core's caches.
//
// Model row r (params[r] = [W (F x C, row-major), b (C)]) trains on batch client k = clients[r],
// whose n_k samples are rows offsets[k] .. offsets[k + 1] - 1 of x [N, F] and y [N]. It takes
// steps[r] steps; with E = ceil(n_k / B) batches per epoch, step t belongs to epoch e = t / E and
// uses the positions [(t mod E) B, min((t mod E + 1) B, n_k)) of that epoch's order of the client's
// rows: the rows j = 0 .. n_k - 1 sorted by
//
//   u(e, j) = uniform(splitmix64(splitmix64(key_k ^ e) ^ j)),  uniform(h) = ((h >> 11) + 1/2) 2^-53
//
// (ties, which need two equal 53-bit values, by j), key_k = keys[k]. On the v rows of a step:
//
//   z_i = x_i W + b,   p_i = softmax(z_i),   g_i = (p_i - onehot(y_i)) / v,
//   W <- W - lr sum_i x_i^T g_i,   b <- b - lr sum_i g_i,
//
// one SGD step on the mean cross-entropy of the v rows. params[r] is overwritten by the trained
// model. With `received_loss`, received_loss[r] is the mean cross-entropy of the starting model on
// all n_k rows (in row order; each row's loss in float, the sum in double).
//
// Rows train independently, one row on one thread from start to end, so a row's numbers depend
// neither on the other rows of the call nor on the thread count.
//
// Validation first: the labels of every client a row trains are checked before any row is
// written, so a call that fails (a label outside [0, C), or C outside 1 .. 128) leaves params and
// received_loss as they were. params and received_loss share no memory with the inputs or each
// other (the binding refuses it).
//
// On CUDA (cuda::softmax_regression_sgd) x, y, keys, params and received_loss are device memory
// and offsets, client and steps host memory: the host sizes the launch from them (each row's
// sort scratch) and stages them to the device with one pinned, asynchronous copy on `stream`.
// The call neither synchronises nor raises for labels: a row whose client has a label outside
// [0, C) is left untouched and its received_loss set to NaN (the Python wrapper checks labels
// first unless told not to).
#pragma once

#include <cstdint>

#include "fastfair/common.h"

namespace fastfair {

struct SoftmaxRegressionArgs {
  int64_t rows;             // R model rows
  int64_t clients;          // K batch clients
  int64_t features;         // F
  int64_t classes;          // C >= 1
  int64_t batch_size;       // B >= 1
  float lr;                 // > 0
  const float* x;           // [N, F], C-contiguous
  const int64_t* y;         // [N] classes in [0, C)
  const int64_t* offsets;   // [K + 1], 0 = offsets[0] <= ... <= offsets[K] = N
  const int64_t* keys;      // [K] shuffle keys (uint64 bit patterns)
  const int64_t* client;    // [R] batch client of each row, in [0, K)
  const int64_t* steps;     // [R] steps of each row, >= 0
  float* params;            // [R, F C + C], C-contiguous; trained in place
  double* received_loss;    // [R] or nullptr
};

namespace cpu {
Status softmax_regression_sgd(const SoftmaxRegressionArgs& args);
}  // namespace cpu

namespace cuda {
Status softmax_regression_sgd(const SoftmaxRegressionArgs& args, void* stream);
}  // namespace cuda

}  // namespace fastfair
