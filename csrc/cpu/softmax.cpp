#include "fastfair/softmax.h"

#include <vector>

#include "fastfair/cpu_isa.h"

namespace fastfair::cpu {

FASTFAIR_CPU_DISPATCH(Status, softmax, (const SoftmaxArgs& a), (a))

Status eg_sparse_step(const SoftmaxArgs& a, const SparseGradient& g) {
  auto* x = static_cast<double*>(a.x);
  const int64_t n = a.rows * g.m;
  // The entries the scatter changes, so that a failing softmax can put them back.
  std::vector<double> old(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    double& e = x[(t / g.m) * a.cols + g.ids[t]];
    old[t] = e;
    e += g.values[t];
  }
  Status st = softmax(a);
  if (!st.ok)
    for (int64_t t = n - 1; t >= 0; --t) x[(t / g.m) * a.cols + g.ids[t]] = old[t];
  return st;
}

}  // namespace fastfair::cpu
