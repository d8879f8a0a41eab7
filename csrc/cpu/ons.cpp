#include "fastfair/cpu_isa.h"
#include "fastfair/ons.h"

namespace fastfair::cpu {
FASTFAIR_CPU_DISPATCH(Status, simplex_qp, (const SimplexQpArgs& a, QpInfo* info), (a, info))
FASTFAIR_CPU_DISPATCH(Status, simplex_qp_batched, (const SimplexQpBatchArgs& a), (a))
FASTFAIR_CPU_DISPATCH(Status, ons_step, (const OnsStepArgs& a, QpInfo* info), (a, info))
FASTFAIR_CPU_DISPATCH(Status, spd_inverse, (const double* H, int64_t K, double* Hinv), (H, K, Hinv))
}  // namespace fastfair::cpu
