// Binding of keyed normals for ragged segments.
#include <string>

#include "array.h"
#include "dlpack.h"
#include "fastfair/normal_segments.h"
#include "ids.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

void normal_segments(py::handle keys, py::handle offsets, py::handle out, int64_t stream) {
  ArrayView kv = view(keys, "keys", stream);
  require_cuda_built(kv, "keys");
  if (!((kv.dlpack_code == kDLUInt || kv.dlpack_code == kDLInt) && kv.dlpack_bits == 64))
    throw py::value_error("keys must have dtype uint64 or int64; got " + kv.dtype_str());
  if (kv.ndim() != 1) throw py::value_error("keys must have shape [m]");
  if (kv.numel() > 0) require_contiguous(kv, "keys");
  const int64_t m = kv.shape[0];
  ArrayView fv = view(offsets, "offsets", stream);
  require_same_device(fv, "offsets", kv, "keys");
  require_int64(fv, "offsets");
  if (fv.ndim() != 1 || fv.shape[0] != m + 1)
    throw py::value_error("offsets must have shape [m + 1] = [" + std::to_string(m + 1) + "]");
  ArrayView ov = view(out, "out", stream);
  require_same_device(ov, "out", kv, "keys");
  if (!ov.is_float || (ov.dtype != DType::f32 && ov.dtype != DType::f64))
    throw py::value_error("out must be float32 or float64; got " + ov.dtype_str());
  if (ov.ndim() != 1) throw py::value_error("out must have shape [N]");
  if (ov.numel() > 0) require_contiguous(ov, "out");
  require_writable(ov, "out");
  const NormalSegmentsArgs a{ov.dtype, m, static_cast<const uint64_t*>(kv.data),
                             static_cast<const int64_t*>(fv.data), ov.shape[0], ov.data};
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
