#include "fastfair/softmax_regression.h"

#include "fastfair/cpu_isa.h"

namespace fastfair::cpu {

FASTFAIR_CPU_DISPATCH(Status, softmax_regression_sgd, (const SoftmaxRegressionArgs& a), (a))

}  // namespace fastfair::cpu
