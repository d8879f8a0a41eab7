#include "cuda_utils.h"
#include "fastfair/sampling.h"

namespace fastfair {
namespace {

constexpr int kThreads = 256;

__global__ void sample_kernel(FeistelKey key, int64_t m, int64_t* __restrict__ ids) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < m) ids[j] = int64_t(sampled_id(key, uint64_t(j)));
}

template <typename P>
__global__ void availability_kernel(int64_t K, const P* __restrict__ prob, double prob_scalar,
                                    uint64_t seed, uint32_t round, uint8_t* __restrict__ mask) {
  const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (4 * g >= K) return;
  const philox::U32x4 w = philox::draw(seed, round, philox::kTagAvailability, uint64_t(g));
  for (int l = 0; l < 4; ++l) {
    const int64_t i = 4 * g + l;
    if (i >= K) break;
    const double p = prob ? double(prob[i]) : prob_scalar;
    mask[i] = uint8_t(philox::to_unit_double(w.v[l]) < p);
  }
}

}  // namespace

namespace cuda {

Status sample_clients(int64_t num_clients, int64_t m, uint64_t seed, uint32_t round, int64_t* ids,
                      void* stream) {
  if (m == 0) return Status::success();
  const FeistelKey key = make_feistel_key(uint64_t(num_clients), seed, round);
  sample_kernel<<<unsigned((m + kThreads - 1) / kThreads), kThreads, 0,
                  static_cast<cudaStream_t>(stream)>>>(key, m, ids);
  return cuda_detail::check(cudaGetLastError(), "sample_clients kernel launch");
}

Status availability(const AvailabilityArgs& a, void* stream_ptr) {
  auto stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t groups = (a.num_clients + 3) / 4;
  const unsigned grid = unsigned((groups + kThreads - 1) / kThreads);
  if (a.prob != nullptr && a.prob_dtype == DType::f32)
    availability_kernel<float><<<grid, kThreads, 0, stream>>>(
        a.num_clients, static_cast<const float*>(a.prob), 0.0, a.seed, a.round, a.mask);
  else
    availability_kernel<double><<<grid, kThreads, 0, stream>>>(
        a.num_clients, static_cast<const double*>(a.prob), a.prob_scalar, a.seed, a.round, a.mask);
  return cuda_detail::check(cudaGetLastError(), "availability kernel launch");
}

}  // namespace cuda
}  // namespace fastfair
