// O(m) Feistel evaluations and one Philox call per four clients: scalar code is fast enough.
#include "fastfair/sampling.h"

namespace fastfair::cpu {

Status sample_clients(int64_t num_clients, int64_t m, uint64_t seed, uint32_t round, int64_t* ids) {
  if (m == 0) return Status::success();
  const FeistelKey key = make_feistel_key(uint64_t(num_clients), seed, round);
  // Threads only pay off for large m; the ids do not depend on the split.
#pragma omp parallel for schedule(static) if (m >= (int64_t(1) << 16))
  for (int64_t j = 0; j < m; ++j) ids[j] = int64_t(sampled_id(key, uint64_t(j)));
  return Status::success();
}

namespace {
template <typename P>
void availability_run(const AvailabilityArgs& a, const P* prob) {
  const int64_t K = a.num_clients;
  const int64_t groups = (K + 3) / 4;
#pragma omp parallel for schedule(static) if (K >= (int64_t(1) << 18))
  for (int64_t g = 0; g < groups; ++g) {
    const philox::U32x4 w = philox::draw(a.seed, a.round, philox::kTagAvailability, uint64_t(g));
    for (int l = 0; l < 4; ++l) {
      const int64_t i = 4 * g + l;
      if (i >= K) break;
      const double p = prob ? double(prob[i]) : a.prob_scalar;
      a.mask[i] = uint8_t(philox::to_unit_double(w.v[l]) < p);
    }
  }
}
}  // namespace

Status availability(const AvailabilityArgs& a) {
  if (a.prob == nullptr)
    availability_run<double>(a, nullptr);
  else if (a.prob_dtype == DType::f64)
    availability_run(a, static_cast<const double*>(a.prob));
  else
    availability_run(a, static_cast<const float*>(a.prob));
  return Status::success();
}

}  // namespace fastfair::cpu
