#include "fastfair/cpu_isa.h"
#include "fastfair/weighted_average.h"

namespace fastfair::cpu {
FASTFAIR_CPU_DISPATCH(Status, weighted_average, (const AverageArgs& a), (a))
}  // namespace fastfair::cpu
