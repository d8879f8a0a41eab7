#include "fastfair/cpu_isa.h"
#include "fastfair/ons.h"

namespace fastfair::cpu {
FASTFAIR_CPU_DISPATCH(Status, simplex_qp, (const SimplexQpArgs& a, QpInfo* info), (a, info))
FASTFAIR_CPU_DISPATCH(Status, simplex_qp_batched, (const SimplexQpBatchArgs& a), (a))
FASTFAIR_CPU_DISPATCH(Status, ons_step, (const OnsStepArgs& a, QpInfo* info), (a, info))
FASTFAIR_CPU_DISPATCH(Status, ons_settle, (const OnsSettleArgs& a), (a))
}  // namespace fastfair::cpu
