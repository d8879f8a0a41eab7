#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda_utils.h"
#include "fastfair/weighted_average.h"

namespace fastfair {
namespace {

constexpr int kThreads = 256;
constexpr int kColsPerThread = 4;

struct DeviceTile {
  int64_t segment, begin, end;
};

struct Tables {
  const DeviceTile* tiles;
  const void* const* inputs;  // [N * L]
  void* const* outputs;       // [L]
};

// A block owns one tile of columns. Its threads form kThreads / lanes column groups and `lanes`
// row lanes; lane r sums rows r, r + lanes, ... and the lanes are then added in lane order, so the
// result depends only on (N, lanes), which the host derives from the problem size.
template <typename T>
__global__ void weighted_average_kernel(Tables tab, const double* __restrict__ weights,
                                        int64_t n, int64_t num_segments, int lanes,
                                        AverageMode mode, double lr) {
  using Acc = typename Storage<T>::acc;
  extern __shared__ unsigned char smem_raw[];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);

  const DeviceTile tile = tab.tiles[blockIdx.x];
  const int width = kThreads / lanes;
  const int col = threadIdx.x % width;
  const int lane = threadIdx.x / width;

  Acc acc[kColsPerThread];
#pragma unroll
  for (int k = 0; k < kColsPerThread; ++k) acc[k] = Acc(0);

  for (int64_t i = lane; i < n; i += lanes) {
    const T* x = static_cast<const T*>(tab.inputs[i * num_segments + tile.segment]);
    const Acc w = Acc(weights[i]);
#pragma unroll
    for (int k = 0; k < kColsPerThread; ++k) {
      const int64_t j = tile.begin + col + int64_t(k) * width;
      if (j < tile.end) acc[k] += w * Storage<T>::load(x[j]);
    }
  }

  if (lanes > 1) {
#pragma unroll
    for (int k = 0; k < kColsPerThread; ++k) smem[(k * lanes + lane) * width + col] = acc[k];
    __syncthreads();
    if (lane != 0) return;
#pragma unroll
    for (int k = 0; k < kColsPerThread; ++k) {
      Acc s = Acc(0);
      for (int r = 0; r < lanes; ++r) s += smem[(k * lanes + r) * width + col];
      acc[k] = s;
    }
  }

#pragma unroll
  for (int k = 0; k < kColsPerThread; ++k) {
    const int64_t j = tile.begin + col + int64_t(k) * width;
    if (j >= tile.end) continue;
    if (mode == AverageMode::accumulate) {
      static_cast<Acc*>(tab.outputs[tile.segment])[j] += acc[k];
    } else {
      T* out = static_cast<T*>(tab.outputs[tile.segment]);
      out[j] = (mode == AverageMode::write)
                   ? Storage<T>::store(acc[k])
                   : Storage<T>::store(Storage<T>::load(out[j]) - Acc(lr) * acc[k]);
    }
  }
}

// More row lanes when there are too few column tiles to fill the GPU; a function of the problem
// size only, so that results are reproducible across devices.
int choose_lanes(int64_t n, int64_t total) {
  int lanes = 1;
  while (lanes < 32 && total * lanes < (int64_t(1) << 21) && n >= 4 * lanes * 2) lanes *= 2;
  return lanes;
}

}  // namespace

namespace cuda {

Status weighted_average(const AverageArgs& a, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  int64_t total = 0;
  for (int64_t l = 0; l < a.num_segments; ++l) total += a.segment_len[l];
  const int lanes = choose_lanes(a.num_clients, total);
  const int64_t tile_width = int64_t(kThreads / lanes) * kColsPerThread;

  std::vector<DeviceTile> tiles;
  for (int64_t l = 0; l < a.num_segments; ++l)
    for (int64_t b = 0; b < a.segment_len[l]; b += tile_width)
      tiles.push_back({l, b, std::min(b + tile_width, a.segment_len[l])});
  if (tiles.empty()) return Status::success();

  const size_t n_ptr = size_t(a.num_clients * a.num_segments);
  const size_t tile_bytes = tiles.size() * sizeof(DeviceTile);
  const size_t in_bytes = n_ptr * sizeof(void*);
  const size_t out_bytes = size_t(a.num_segments) * sizeof(void*);

  auto& ring = cuda_detail::table_ring();
  cuda_detail::HostTableRing::Lease lease;
  Status st = ring.acquire(tile_bytes + in_bytes + out_bytes, &lease);
  if (!st.ok) return st;
  auto* host = static_cast<unsigned char*>(lease.host);
  auto* dev = static_cast<unsigned char*>(lease.device);
  std::memcpy(host, tiles.data(), tile_bytes);
  std::memcpy(host + tile_bytes, a.inputs, in_bytes);
  std::memcpy(host + tile_bytes + in_bytes, a.outputs, out_bytes);
  Tables tab{reinterpret_cast<const DeviceTile*>(dev),
             reinterpret_cast<const void* const*>(dev + tile_bytes),
             reinterpret_cast<void* const*>(dev + tile_bytes + in_bytes)};

  const unsigned grid = static_cast<unsigned>(tiles.size());
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = typename Storage<T>::acc;
    const size_t smem = lanes > 1 ? size_t(kThreads) * kColsPerThread * sizeof(Acc) : 0;
    weighted_average_kernel<T><<<grid, kThreads, smem, stream>>>(
        tab, a.weights, a.num_clients, a.num_segments, lanes, a.mode, a.lr);
    return 0;
  });
  st = cuda_detail::check(cudaGetLastError(), "weighted_average kernel launch");
  Status released = ring.release(lease, stream);
  if (!st.ok) return st;
  return released;
}

}  // namespace cuda
}  // namespace fastfair
