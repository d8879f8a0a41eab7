#include "fastfair/label_segments.h"

#include "fastfair/cpu_isa.h"

namespace fastfair::cpu {

FASTFAIR_CPU_DISPATCH(Status, label_segments, (const LabelSegmentsArgs& a), (a))

}  // namespace fastfair::cpu
