// Binding of the Euclidean projection onto the simplex, row by row.
#include "array.h"
#include "fastfair/simplex.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

void project_simplex(py::handle v, py::handle out, int64_t stream) {
  ArrayView vv = view(v, "v", stream);
  if (vv.ndim() != 1 && vv.ndim() != 2)
    throw py::value_error("v must have shape [K] or [B, K]; got " + std::to_string(vv.ndim()) +
                          " axes");
  Spec().dtype(kF32or64).rows(1).check(vv);
  const int64_t rows = vv.ndim() == 2 ? vv.shape[0] : 1;
  const int64_t cols = vv.shape[vv.ndim() - 1];
  if (cols == 0) throw py::value_error("v has no entries: the simplex needs K >= 1");
  ArrayView ov = typed(out, "out", Spec().on(vv).writable(), stream);
  require_same_dtype(ov, vv);
  if (ov.shape != vv.shape) throw py::value_error("out must have the shape of v");
  require_disjoint({&ov}, {&vv});
  SimplexArgs a{vv.dtype, rows, cols, vv.data, vv.ndim() == 2 ? vv.strides[0] : cols, ov.data};
  if (rows == 0) return;
  run_on_device(vv, stream, [&] { throw_value_error_if_failed(cpu::project_simplex(a)); },
                [&](void* s) { throw_if_failed(cuda::project_simplex(a, s)); });
}

void register_simplex(py::module_& m) {
  m.def("project_simplex", &project_simplex, py::arg("v"), py::arg("out"), py::arg("stream"),
        "Euclidean projection of each row of v onto the probability simplex; see fastfair.ops.");
}
FASTFAIR_REGISTER(register_simplex);

}  // namespace
}  // namespace fastfair::binding
