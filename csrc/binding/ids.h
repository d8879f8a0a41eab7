// Checks of client-id arrays shared by the client-weight ops.
#pragma once

#include <cstdint>
#include <string>

#include "array.h"

namespace fastfair::binding {

// CPU ids: every id in [0, num_clients) and no id twice (expected O(m), hash set). Raises
// ValueError naming `name`, the id and its position(s).
void check_ids(const int64_t* ids, int64_t m, int64_t num_clients, const std::string& name);

// CPU values: all finite. Raises ValueError naming `name` and the position.
void check_finite(const double* v, int64_t m, const std::string& name);

// CPU offsets: 0 = offsets[0] <= offsets[1] <= ... <= offsets[m] = total, where total is `what`
// (e.g. "out's length"). Raises ValueError naming the position.
void check_offsets(const int64_t* offsets, int64_t m, int64_t total, const std::string& what);

}  // namespace fastfair::binding
