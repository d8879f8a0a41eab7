// The cohort's local SGD of multinomial logistic regression on the GPU: one block trains one model
// row through all its steps, so a whole round (every client of every lane) is one launch. The
// row's model and its step gradient sit in shared memory where they fit (else the model is
// trained in place in params and the gradient in a scratch row); the logits of up to kChunk rows
// of a step at a time sit in shared memory. Each epoch's order is a bitonic sort of the rows'
// (u(e, j), j) keys in a scratch area of the row.
//
// The sums run in the CPU kernel's order (the forward pass over features, the gradient over the
// step's rows, the received loss over the client's rows in double), so the two kernels differ
// by the rounding of their exponentials and the order of the softmax sums only.
#include <algorithm>
#include <climits>
#include <cmath>
#include <mutex>
#include <vector>

#include "cuda_utils.h"
#include "fastfair/softmax_regression.h"

namespace fastfair {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 32;  // rows of a step whose logits sit in shared memory at once
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The per-launch tables the host stages (device copies) and the scratch it allocates.
struct Tables {
  const int64_t* offsets;     // [K + 1]
  const int64_t* client;      // [R]
  const int64_t* steps;       // [R]
  const int64_t* sort_at;     // [R] first scratch entry of the row's sort area
  uint64_t* sort_key;         // scratch: the row's epoch keys, padded to a power of two
  int32_t* sort_row;          // scratch: their row indices
  float* gradient;            // [R, P] scratch rows, or nullptr when the gradient is shared
};

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The epoch-e order of the client's n rows into sort_row[0 .. n): rows j sorted by
// (splitmix64(splitmix64(key ^ e) ^ j) >> 11, j), as the CPU kernel sorts them.
__device__ void epoch_order(uint64_t key, uint64_t e, int64_t n, int64_t padded, uint64_t* skey,
                            int32_t* srow) {
  const uint64_t h = splitmix64(key ^ e);
  for (int64_t j = threadIdx.x; j < padded; j += blockDim.x) {
    skey[j] = j < n ? splitmix64(h ^ uint64_t(j)) >> 11 : ~uint64_t(0);
    srow[j] = j < n ? int32_t(j) : INT_MAX;
  }
  __syncthreads();
  for (int64_t size = 2; size <= padded; size <<= 1) {
    for (int64_t stride = size >> 1; stride > 0; stride >>= 1) {
      for (int64_t i = threadIdx.x; i < padded / 2; i += blockDim.x) {
        const int64_t lo = (i / stride) * 2 * stride + (i % stride), hi = lo + stride;
        const bool ascending = (lo & size) == 0;
        const uint64_t klo = skey[lo], khi = skey[hi];
        const int32_t rlo = srow[lo], rhi = srow[hi];
        const bool greater = klo > khi || (klo == khi && rlo > rhi);
        if (greater == ascending) {
          skey[lo] = khi;
          skey[hi] = klo;
          srow[lo] = rhi;
          srow[hi] = rlo;
        }
      }
      __syncthreads();
    }
  }
}

// Logits z[i][c] = b[c] + sum_f x[rows[i]][f] W[f][c] of `count` rows, features in order.
__device__ __forceinline__ void forward(const float* x0, const int64_t* rows, int count,
                                        const float* W, int64_t F, int64_t C, float* z) {
  for (int64_t q = threadIdx.x; q < count * C; q += blockDim.x) {
    const int64_t i = q / C, c = q % C;
    const float* xi = x0 + rows[i] * F;
    float acc = W[F * C + c];
    for (int64_t f = 0; f < F; ++f) acc = fmaf(xi[f], W[f * C + c], acc);
    z[q] = acc;
  }
}

__global__ void __launch_bounds__(kThreads)
train_rows(SoftmaxRegressionArgs a, Tables t, bool shared_model) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t r = blockIdx.x;
  const int64_t F = a.features, C = a.classes, P = F * C + C, B = a.batch_size;
  const int64_t k = t.client[r], first = t.offsets[k], n = t.offsets[k + 1] - first;
  const float* x0 = a.x + first * F;
  const int64_t* y0 = a.y + first;
  float* theta = a.params + r * P;

  float* z = reinterpret_cast<float*>(smem);                   // [kChunk][C]
  float* row_loss = z + kChunk * C;                            // [kChunk]
  int64_t* rows = reinterpret_cast<int64_t*>(row_loss + kChunk);  // [kChunk]
  __shared__ int bad_label;

  // A row whose client has a label outside [0, C) stays untouched (received loss NaN).
  if (threadIdx.x == 0) bad_label = 0;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    if (y0[i] < 0 || y0[i] >= C) bad_label = 1;
  __syncthreads();
  if (bad_label) {
    if (threadIdx.x == 0 && a.received_loss) a.received_loss[r] = NAN;
    return;
  }

  float* W = theta;
  float* G = t.gradient ? t.gradient + r * P : nullptr;
  if (shared_model) {
    W = reinterpret_cast<float*>(rows + kChunk);
    G = W + P;
    for (int64_t q = threadIdx.x; q < P; q += blockDim.x) W[q] = theta[q];
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  if (a.received_loss) {
    double total = 0.0;  // thread 0's running sum, in row order
    for (int64_t lo = 0; lo < n; lo += kChunk) {
      const int count = int(min(int64_t(kChunk), n - lo));
      for (int i = threadIdx.x; i < count; i += blockDim.x) rows[i] = lo + i;
      __syncthreads();
      forward(x0, rows, count, W, F, C, z);
      __syncthreads();
      for (int i = warp; i < count; i += kWarps) {
        const float* zi = z + i * C;
        float top = -INFINITY;
        for (int64_t c = lane; c < C; c += 32) top = fmaxf(top, zi[c]);
        top = warp_max(top);
        float sum = 0.0f;
        for (int64_t c = lane; c < C; c += 32) sum += exp2f((zi[c] - top) * kLog2e);
        sum = warp_sum(sum);
        if (lane == 0) row_loss[i] = logf(sum) + (top - zi[y0[lo + i]]);
      }
      __syncthreads();
      if (threadIdx.x == 0)
        for (int i = 0; i < count; ++i) total += double(row_loss[i]);
      __syncthreads();
    }
    if (threadIdx.x == 0) a.received_loss[r] = n ? total / double(n) : NAN;
  }

  const int64_t steps = n ? t.steps[r] : 0;
  const int64_t per_epoch = n ? (n + B - 1) / B : 1;
  int64_t padded = 1;
  while (padded < n) padded <<= 1;
  uint64_t* skey = t.sort_key + (steps ? t.sort_at[r] : 0);
  int32_t* srow = t.sort_row + (steps ? t.sort_at[r] : 0);
  const uint64_t key = uint64_t(a.keys[k]);
  const float lr = a.lr;

  for (int64_t s = 0; s < steps; ++s) {
    const int64_t within = s % per_epoch;
    if (within == 0) epoch_order(key, uint64_t(s / per_epoch), n, padded, skey, srow);
    const int64_t lo = within * B, v = min(B, n - lo);
    const float inv_v = 1.0f / float(v);
    for (int64_t q = threadIdx.x; q < P; q += blockDim.x) G[q] = 0.0f;
    for (int64_t c0 = 0; c0 < v; c0 += kChunk) {
      const int count = int(min(int64_t(kChunk), v - c0));
      for (int i = threadIdx.x; i < count; i += blockDim.x) rows[i] = srow[lo + c0 + i];
      __syncthreads();
      forward(x0, rows, count, W, F, C, z);
      __syncthreads();
      // z -> (softmax(z) - onehot(y)) / v, one warp a row.
      for (int i = warp; i < count; i += kWarps) {
        float* zi = z + i * C;
        float top = -INFINITY;
        for (int64_t c = lane; c < C; c += 32) top = fmaxf(top, zi[c]);
        top = warp_max(top);
        float sum = 0.0f;
        for (int64_t c = lane; c < C; c += 32) {
          zi[c] = exp2f((zi[c] - top) * kLog2e);
          sum += zi[c];
        }
        const float scale = inv_v / warp_sum(sum);
        __syncwarp();
        const int64_t y = y0[rows[i]];
        for (int64_t c = lane; c < C; c += 32) zi[c] = zi[c] * scale - (c == y ? inv_v : 0.0f);
      }
      __syncthreads();
      // G[f][c] += sum_i x[rows[i]][f] g[i][c] over this chunk's rows in order; G[F][c] the bias.
      for (int64_t q = threadIdx.x; q < P; q += blockDim.x) {
        const int64_t f = q / C, c = q % C;
        float acc = G[q];
        if (f < F)
          for (int i = 0; i < count; ++i) acc = fmaf(x0[rows[i] * F + f], z[i * C + c], acc);
        else
          for (int i = 0; i < count; ++i) acc += z[i * C + c];
        G[q] = acc;
      }
      __syncthreads();
    }
    for (int64_t q = threadIdx.x; q < P; q += blockDim.x) W[q] -= lr * G[q];
    __syncthreads();
  }
  if (shared_model)
    for (int64_t q = threadIdx.x; q < P; q += blockDim.x) theta[q] = W[q];
}

// The opt-in shared memory per block of the current device, read once per device.
Status max_shared_bytes(size_t* bytes) {
  static std::mutex mu;
  static std::vector<int> known;
  int device = 0;
  Status st = cuda_detail::check(cudaGetDevice(&device), "cudaGetDevice");
  if (!st.ok) return st;
  std::lock_guard<std::mutex> lock(mu);
  if (int(known.size()) <= device) known.resize(device + 1, -1);
  if (known[device] < 0) {
    int v = 0;
    st = cuda_detail::check(
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
        "cudaDeviceGetAttribute");
    if (!st.ok) return st;
    known[device] = v;
  }
  *bytes = size_t(known[device]);
  return Status::success();
}

}  // namespace

namespace cuda {

Status softmax_regression_sgd(const SoftmaxRegressionArgs& a, void* stream_ptr) {
  using cuda_detail::check;
  if (a.rows == 0) return Status::success();
  if (a.classes < 1 || a.classes > 128)
    return Status::error("softmax_regression_sgd supports 1 to 128 classes; got " +
                         std::to_string(a.classes));
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t P = a.features * a.classes + a.classes;

  // Each training row's sort area: its client's row count rounded up to a power of two.
  std::vector<int64_t> sort_at(size_t(a.rows), 0);
  int64_t sort_entries = 0;
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t k = a.client[r], n = a.offsets[k + 1] - a.offsets[k];
    sort_at[r] = sort_entries;
    if (n > 0 && a.steps[r] > 0) {
      int64_t padded = 1;
      while (padded < n) padded <<= 1;
      sort_entries += padded;
    }
  }

  size_t optin = 0;
  Status st = max_shared_bytes(&optin);
  if (!st.ok) return st;
  const size_t base = size_t(kChunk) * size_t(a.classes) * sizeof(float) +
                      kChunk * sizeof(float) + kChunk * sizeof(int64_t);
  const size_t with_model = base + 2 * size_t(P) * sizeof(float);
  const bool shared_model = with_model <= optin;
  const size_t smem = shared_model ? with_model : base;
  if (smem > 48 * 1024) {
    st = check(cudaFuncSetAttribute(train_rows, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)),
               "cudaFuncSetAttribute");
    if (!st.ok) return st;
  }

  cuda_detail::HostTableRing& ring = cuda_detail::table_ring();
  cuda_detail::HostTableRing::Lease lease;
  st = ring.stage({{a.offsets, size_t(a.clients + 1) * sizeof(int64_t)},
                   {a.client, size_t(a.rows) * sizeof(int64_t)},
                   {a.steps, size_t(a.rows) * sizeof(int64_t)},
                   {sort_at.data(), size_t(a.rows) * sizeof(int64_t)}},
                  stream, &lease);
  if (!st.ok) return st;

  const size_t key_bytes = size_t(sort_entries) * sizeof(uint64_t);
  const size_t row_bytes = (size_t(sort_entries) * sizeof(int32_t) + 15) / 16 * 16;
  const size_t gradient_bytes = shared_model ? 0 : size_t(a.rows) * size_t(P) * sizeof(float);
  void* scratch = nullptr;
  const size_t scratch_bytes = std::max<size_t>(key_bytes + row_bytes + gradient_bytes, 16);
  st = check(cudaMallocAsync(&scratch, scratch_bytes, stream), "cudaMallocAsync");
  if (!st.ok) {
    ring.release(lease, stream);
    return st;
  }
  auto* bytes = static_cast<unsigned char*>(scratch);
  const Tables t{static_cast<const int64_t*>(lease.parts[0]),
                 static_cast<const int64_t*>(lease.parts[1]),
                 static_cast<const int64_t*>(lease.parts[2]),
                 static_cast<const int64_t*>(lease.parts[3]),
                 reinterpret_cast<uint64_t*>(bytes),
                 reinterpret_cast<int32_t*>(bytes + key_bytes),
                 shared_model ? nullptr : reinterpret_cast<float*>(bytes + key_bytes + row_bytes)};
  train_rows<<<unsigned(a.rows), kThreads, smem, stream>>>(a, t, shared_model);
  st = check(cudaGetLastError(), "softmax_regression_sgd launch");
  Status freed = check(cudaFreeAsync(scratch, stream), "cudaFreeAsync");
  Status released = ring.release(lease, stream);
  if (!st.ok) return st;
  return freed.ok ? released : freed;
}

}  // namespace cuda
}  // namespace fastfair
