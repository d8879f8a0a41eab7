// Binding of keyed normals for ragged segments.
#include <string>

#include "array.h"
#include "fastfair/normal_segments.h"
#include "ids.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

void normal_segments(py::handle keys, py::handle offsets, py::handle out, int64_t stream) {
  const ArrayView kv = typed(keys, "keys", Spec().dtype(kU64 | kI64).shape({-1}, "[m]"), stream);
  const int64_t m = kv.shape[0];
  const ArrayView fv =
      typed(offsets, "offsets", Spec().on(kv).dtype(kI64).shape({m + 1}, "[m + 1]"), stream);
  const ArrayView ov =
      typed(out, "out", Spec().on(kv).dtype(kF32or64).shape({-1}, "[N]").writable(), stream);
  require_disjoint({&ov}, {&kv, &fv});
  const NormalSegmentsArgs a{ov.dtype, m, kv.as<const uint64_t>(), fv.as<const int64_t>(),
                             ov.shape[0], ov.data};
  if (kv.device == Device::cpu) check_offsets(a.offsets, m, a.total, "out's length");
  run_on_device(kv, stream, [&] { throw_if_failed(cpu::normal_segments(a)); },
                [&](void* s) { throw_if_failed(cuda::normal_segments(a, s)); });
}

void register_normal_segments(py::module_& m) {
  m.def("normal_segments", &normal_segments, py::arg("keys"), py::arg("offsets"), py::arg("out"),
        py::arg("stream"),
        "out[offsets[i] + j] = z(keys[i], j): keyed Philox normals per segment; see "
        "fastfair.ops.normal_segments.");
}
FASTFAIR_REGISTER(register_normal_segments);

}  // namespace
}  // namespace fastfair::binding
