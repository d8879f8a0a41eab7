#include "fastfair/sgld.h"

#include "fastfair/cpu_isa.h"

namespace fastfair::cpu {

FASTFAIR_CPU_DISPATCH(Status, sgld_step, (const SgldArgs& a), (a))
FASTFAIR_CPU_DISPATCH(Status, fedevg_server_step, (const FedEvgServerArgs& a), (a))

}  // namespace fastfair::cpu
