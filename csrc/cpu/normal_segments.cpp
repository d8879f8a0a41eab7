#include "fastfair/normal_segments.h"

#include "fastfair/cpu_isa.h"

namespace fastfair::cpu {

FASTFAIR_CPU_DISPATCH(Status, normal_segments, (const NormalSegmentsArgs& a), (a))

}  // namespace fastfair::cpu
