#include "fastfair/superfed.h"

#include "fastfair/cpu_isa.h"

namespace fastfair::cpu {

FASTFAIR_CPU_DISPATCH(Status, superfed_reduce, (const SuperFedReduceArgs& a), (a))
FASTFAIR_CPU_DISPATCH(Status, superfed_step, (const SuperFedStepArgs& a), (a))

}  // namespace fastfair::cpu
