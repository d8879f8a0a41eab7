#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda_utils.h"
#include "fastfair/weighted_average.h"

namespace fastfair {
namespace {

constexpr int kThreads = 256;
constexpr int kRowUnroll = 4;  // rows whose loads are in flight together per thread

// One 16-byte load: 4 floats, 2 doubles or 8 halves.
template <typename T>
struct alignas(16) Pack {
  static constexpr int size = 16 / int(sizeof(T));
  T v[size];
};

// Where the kernel finds its rows. Flat form (one segment, rows equally spaced): `base` and
// `row_stride` in kernel parameters, no table and no copy. List form: tables in device memory.
struct Tables {
  const int64_t* tile_start;   // [L + 1] first tile of each segment
  const int64_t* segment_len;  // [L]
  const void* const* inputs;   // [N * L]
  void* const* outputs;        // [L]
  const char* base;            // flat form: row i starts at base + i * row_stride bytes
  int64_t row_stride;
  int64_t flat_len;
  void* flat_out;
};

template <typename T, bool kFlat>
__device__ __forceinline__ const T* row_ptr(const Tables& tab, int64_t seg, int64_t L, int64_t r) {
  if (kFlat) return reinterpret_cast<const T*>(tab.base + r * tab.row_stride);
  return static_cast<const T*>(tab.inputs[r * L + seg]);
}

// Elements [j, j + V) of x as accumulator values (zeros past `end`). kAligned: every row and
// segment length is a multiple of 16 bytes, so one vector load reads them all.
template <typename T, bool kAligned, typename Acc, int V>
__device__ __forceinline__ void load_pack(const T* __restrict__ x, int64_t j, int64_t end,
                                          Acc (&v)[V]) {
  if (kAligned) {
    const Pack<T> p = *reinterpret_cast<const Pack<T>*>(x + j);
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = Storage<T>::load(p.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = j + k < end ? Storage<T>::load(x[j + k]) : Acc(0);
  }
}

// A block owns one tile of a segment: `width` column groups of V contiguous elements, and
// `lanes` row lanes. Lane r sums rows r, r + lanes, ... in order and the lanes are then added in
// lane order, so the result depends only on (N, lanes), which the host derives from the sizes.
template <typename T, bool kAligned, bool kFlat>
__global__ void __launch_bounds__(kThreads)
weighted_average_kernel(Tables tab, const double* __restrict__ weights, int64_t n,
                        int64_t num_segments, int lanes, AverageMode mode, double lr) {
  using Acc = typename Storage<T>::acc;
  constexpr int V = Pack<T>::size;
  extern __shared__ unsigned char smem_raw[];
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);

  // The segment this block works on: the last l with tile_start[l] <= blockIdx.x.
  const int64_t block = blockIdx.x;
  int64_t seg = 0, first_tile = 0, end = tab.flat_len;
  if (!kFlat) {
    int64_t hi = num_segments;
    while (hi - seg > 1) {
      const int64_t mid = (seg + hi) / 2;
      if (tab.tile_start[mid] <= block) seg = mid; else hi = mid;
    }
    first_tile = tab.tile_start[seg];
    end = tab.segment_len[seg];
  }
  const int width = kThreads / lanes;
  const int col = threadIdx.x % width;
  const int lane = threadIdx.x / width;
  const int64_t j = ((block - first_tile) * width + col) * V;

  Acc acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = Acc(0);
  if (j < end) {
    int64_t i = lane;
    for (; i + (kRowUnroll - 1) * lanes < n; i += kRowUnroll * lanes) {
      Acc v[kRowUnroll][V];
      Acc w[kRowUnroll];
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const int64_t r = i + u * lanes;
        w[u] = Acc(weights[r]);
        load_pack<T, kAligned>(row_ptr<T, kFlat>(tab, seg, num_segments, r), j, end, v[u]);
      }
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u)
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] += w[u] * v[u][k];
    }
    for (; i < n; i += lanes) {
      Acc v[V];
      const Acc w = Acc(weights[i]);
      load_pack<T, kAligned>(row_ptr<T, kFlat>(tab, seg, num_segments, i), j, end, v);
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += w * v[k];
    }
  }

  if (lanes > 1) {
#pragma unroll
    for (int k = 0; k < V; ++k) smem[(k * lanes + lane) * width + col] = acc[k];
    __syncthreads();
    if (lane != 0) return;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      Acc s = Acc(0);
      for (int r = 0; r < lanes; ++r) s += smem[(k * lanes + r) * width + col];
      acc[k] = s;
    }
  }

#pragma unroll
  for (int k = 0; k < V; ++k) {
    const int64_t jk = j + k;
    if (jk >= end) break;
    void* seg_out = kFlat ? tab.flat_out : tab.outputs[seg];
    if (mode == AverageMode::accumulate) {
      static_cast<Acc*>(seg_out)[jk] += acc[k];
    } else {
      T* out = static_cast<T*>(seg_out);
      out[jk] = (mode == AverageMode::write)
                    ? Storage<T>::store(acc[k])
                    : Storage<T>::store(Storage<T>::load(out[jk]) - Acc(lr) * acc[k]);
    }
  }
}

// More row lanes when there are too few column groups to fill the GPU (about 2^19 threads);
// a function of the problem size only, so that results are reproducible across devices.
int choose_lanes(int64_t n, int64_t groups) {
  int lanes = 1;
  while (lanes < 32 && groups * lanes < (int64_t(1) << 19) && n >= 2 * kRowUnroll * lanes)
    lanes *= 2;
  return lanes;
}

}  // namespace

namespace cuda {

Status weighted_average(const AverageArgs& a, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t L = a.num_segments;
  const int64_t n_ptr = a.num_clients * L;
  const int V = dispatch_dtype(a.dtype, [](auto tag) { return Pack<decltype(tag)>::size; });

  int64_t groups = 0;
  bool aligned = true;
  for (int64_t l = 0; l < L; ++l) {
    groups += (a.segment_len[l] + V - 1) / V;
    aligned = aligned && a.segment_len[l] % V == 0;
  }
  for (int64_t p = 0; p < n_ptr && aligned; ++p)
    aligned = reinterpret_cast<uintptr_t>(a.inputs[p]) % 16 == 0;
  const int lanes = choose_lanes(a.num_clients, groups);
  const int64_t tile_elems = int64_t(kThreads / lanes) * V;

  std::vector<int64_t> tile_start(size_t(L) + 1, 0);
  for (int64_t l = 0; l < L; ++l)
    tile_start[l + 1] = tile_start[l] + (a.segment_len[l] + tile_elems - 1) / tile_elems;
  const int64_t tiles = tile_start[L];
  if (tiles == 0) return Status::success();

  // One segment with equally spaced rows (the flat [N, D] form) needs no table in device memory.
  bool flat = L == 1;
  const auto* base = static_cast<const char*>(a.inputs[0]);
  const int64_t row_stride = a.num_clients > 1 ? static_cast<const char*>(a.inputs[1]) - base : 0;
  for (int64_t i = 2; i < a.num_clients && flat; ++i)
    flat = static_cast<const char*>(a.inputs[i]) == base + i * row_stride;

  auto& ring = cuda_detail::table_ring();
  cuda_detail::HostTableRing::Lease lease;
  Tables tab{};
  Status st = Status::success();
  if (flat) {
    tab.base = base;
    tab.row_stride = row_stride;
    tab.flat_len = a.segment_len[0];
    tab.flat_out = a.outputs[0];
  } else {
    st = ring.stage({{tile_start.data(), tile_start.size() * sizeof(int64_t)},
                     {a.segment_len, size_t(L) * sizeof(int64_t)},
                     {a.inputs, size_t(n_ptr) * sizeof(void*)},
                     {a.outputs, size_t(L) * sizeof(void*)}},
                    stream, &lease);
    if (!st.ok) return st;
    tab.tile_start = static_cast<const int64_t*>(lease.parts[0]);
    tab.segment_len = static_cast<const int64_t*>(lease.parts[1]);
    tab.inputs = static_cast<const void* const*>(lease.parts[2]);
    tab.outputs = static_cast<void* const*>(lease.parts[3]);
  }

  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Acc = typename Storage<T>::acc;
    const size_t smem = lanes > 1 ? size_t(kThreads) * Pack<T>::size * sizeof(Acc) : 0;
    auto kernel = flat ? (aligned ? weighted_average_kernel<T, true, true>
                                  : weighted_average_kernel<T, false, true>)
                       : (aligned ? weighted_average_kernel<T, true, false>
                                  : weighted_average_kernel<T, false, false>);
    kernel<<<unsigned(tiles), kThreads, smem, stream>>>(tab, a.weights, a.num_clients, L, lanes,
                                                        a.mode, a.lr);
    return 0;
  });
  st = cuda_detail::check(cudaGetLastError(), "weighted_average kernel launch");
  Status released = ring.release(lease, stream);
  return st.ok ? released : st;
}

}  // namespace cuda
}  // namespace fastfair
