// Binding of per-segment affine labelling (optionally transforming the rows in place first).
#include <string>

#include "array.h"
#include "fastfair/label_segments.h"
#include "ids.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

void label_segments(py::handle x, py::handle offsets, py::handle W, py::handle b,
                    py::handle scale, py::handle shift, py::handle y, int64_t stream) {
  const bool transform = !scale.is_none();
  Spec xs = Spec().dtype(kF32).shape({-1, -1}, "[N, F]");
  if (transform) xs.writable();
  const ArrayView xv = typed(x, "x", xs, stream);
  const int64_t N = xv.shape[0], F = xv.shape[1];
  if (F < 1) throw py::value_error("x must have at least one feature column; got shape [" +
                                   std::to_string(N) + ", 0]");
  const ArrayView fv =
      typed(offsets, "offsets", Spec().on(xv).dtype(kI64).shape({-1}, "[m + 1]"), stream);
  if (fv.shape[0] < 1) throw py::value_error("offsets must have shape [m + 1]; got [0]");
  const int64_t m = fv.shape[0] - 1;
  const ArrayView wv = typed(W, "W", Spec().on(xv).dtype(kF32).shape({m, F, -1}, "[m, F, C]"),
                             stream);
  const int64_t C = wv.shape[2];
  if (C < 1) throw py::value_error("W must have at least one class; got C = 0");
  const ArrayView bv = typed(b, "b", Spec().on(xv).dtype(kF32).shape({m, C}, "[m, C]"), stream);
  ArrayView sv, hv;
  if (transform) {
    sv = typed(scale, "scale", Spec().on(xv).dtype(kF32).shape({F}, "[F]"), stream);
    hv = typed(shift, "shift", Spec().on(xv).dtype(kF32).shape({m, F}, "[m, F]"), stream);
  } else if (!shift.is_none()) {
    throw py::value_error("shift needs scale: pass both (x * scale + shift) or neither");
  }
  const ArrayView yv =
      typed(y, "y", Spec().on(xv).dtype(kI64).shape({N}, "[N]").writable(), stream);
  require_disjoint({&xv, &yv}, {&fv, &wv, &bv, &sv, &hv});
  require_disjoint({&yv}, {&xv});
  if (xv.device == Device::cpu) check_offsets(fv.as<const int64_t>(), m, N, "x's rows");
  const LabelSegmentsArgs a{m, N, F, C, fv.as<const int64_t>(), xv.as<float>(),
                            transform ? sv.as<const float>() : nullptr,
                            transform ? hv.as<const float>() : nullptr, wv.as<const float>(),
                            bv.as<const float>(), yv.as<int64_t>()};
  run_on_device(xv, stream, [&] { throw_if_failed(cpu::label_segments(a)); },
                [&](void* s) { throw_if_failed(cuda::label_segments(a, s)); });
}

void register_label_segments(py::module_& m) {
  m.def("label_segments", &label_segments, py::arg("x"), py::arg("offsets"), py::arg("W"),
        py::arg("b"), py::arg("scale"), py::arg("shift"), py::arg("y"), py::arg("stream"),
        "y[r] = argmax_c(b[i, c] + sum_f x[r, f] W[i, f, c]) over the rows of segment i, after "
        "x <- x * scale + shift[i] when scale is given; see fastfair.ops.label_segments.");
}
FASTFAIR_REGISTER(register_label_segments);

}  // namespace
}  // namespace fastfair::binding
