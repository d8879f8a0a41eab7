#include "fastfair/softmax.h"

#include "fastfair/cpu_isa.h"

namespace fastfair::cpu {

FASTFAIR_CPU_DISPATCH(Status, softmax, (const SoftmaxArgs& a), (a))

void scatter_add(double* x, const int64_t* ids, const double* values, int64_t m) {
  for (int64_t j = 0; j < m; ++j) x[ids[j]] += values[j];
}

}  // namespace fastfair::cpu
