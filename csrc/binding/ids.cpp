#include "ids.h"

#include <cmath>
#include <vector>

namespace fastfair::binding {

void check_ids(const int64_t* ids, int64_t m, int64_t num_clients, const std::string& name) {
  int64_t cap = 16;
  while (cap < 2 * m) cap *= 2;
  int shift = 64;
  for (int64_t c = cap; c > 1; c >>= 1) --shift;
  std::vector<int64_t> key(static_cast<size_t>(cap), -1), pos(static_cast<size_t>(cap));
  for (int64_t j = 0; j < m; ++j) {
    const int64_t id = ids[j];
    if (id < 0 || id >= num_clients)
      throw py::value_error(name + " must be client ids in [0, " + std::to_string(num_clients) +
                            "); got " + std::to_string(id) + " at position " + std::to_string(j));
    uint64_t h = (uint64_t(id) * 0x9E3779B97F4A7C15ull) >> shift;
    while (key[h] != -1) {
      if (key[h] == id)
        throw py::value_error(name + " must be distinct; client " + std::to_string(id) +
                              " appears at positions " + std::to_string(pos[h]) + " and " +
                              std::to_string(j));
      h = (h + 1) & uint64_t(cap - 1);
    }
    key[h] = id;
    pos[h] = j;
  }
}

void check_finite(const double* v, int64_t m, const std::string& name) {
  for (int64_t j = 0; j < m; ++j)
    if (!std::isfinite(v[j]))
      throw py::value_error(name + " must be finite; got " + std::to_string(v[j]) +
                            " at position " + std::to_string(j));
}

void check_offsets(const int64_t* off, int64_t m, int64_t total, const std::string& what) {
  if (off[0] != 0) throw py::value_error("offsets must start at 0; got " + std::to_string(off[0]));
  for (int64_t i = 0; i < m; ++i)
    if (off[i + 1] < off[i])
      throw py::value_error("offsets must be non-decreasing; got " + std::to_string(off[i + 1]) +
                            " < " + std::to_string(off[i]) + " at position " +
                            std::to_string(i + 1));
  if (off[m] != total)
    throw py::value_error("offsets must end at N = " + what + " " + std::to_string(total) +
                          "; got " + std::to_string(off[m]));
}

}  // namespace fastfair::binding
