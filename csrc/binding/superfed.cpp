// Binding of the SuPerFed client passes (reduce, then fused step / mix).
#include <string>
#include <vector>

#include "array.h"
#include "fastfair/superfed.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

// The layout arrays of a cohort f [m, P] float32: offsets [S + 1] int64, twinned [S] bool/uint8.
struct Layout {
  ArrayView offsets, twinned;
  SuperFedLayout L;
};

Layout layout_of(const ArrayView& fv, py::handle offsets, py::handle twinned, int64_t stream) {
  Spec().dtype(kF32).shape({-1, -1}, "[m, P]").check(fv);
  Layout lay;
  lay.offsets = typed(offsets, "offsets", Spec().on(fv).dtype(kI64).shape({-1}, "[S + 1]"), stream);
  if (lay.offsets.shape[0] < 1) throw py::value_error("offsets must have shape [S + 1]; got [0]");
  const int64_t S = lay.offsets.shape[0] - 1, P = fv.shape[1];
  lay.twinned = typed(twinned, "twinned", Spec().on(fv).dtype(kByte).shape({S}, "[S]"), stream);
  const auto* off = lay.offsets.as<const int64_t>();
  if (fv.device == Device::cpu) {  // CUDA offsets are checked by the Python layout object
    if (off[0] != 0 || off[S] != P)
      throw py::value_error("offsets must start at 0 and end at P = " + std::to_string(P));
    for (int64_t s = 0; s < S; ++s)
      if (off[s + 1] < off[s]) throw py::value_error("offsets must be non-decreasing");
  }
  lay.L = {fv.shape[0], P, S, off, lay.twinned.as<const uint8_t>()};
  return lay;
}

void superfed_reduce(py::handle f, py::handle l, py::handle g, py::handle offsets,
                     py::handle twinned, py::handle out, int64_t stream) {
  const ArrayView fv = view(f, "f", stream);
  const Layout lay = layout_of(fv, offsets, twinned, stream);
  const SuperFedLayout& L = lay.L;
  const ArrayView lv = typed(l, "l", Spec().on(fv).dtype(kF32).shape(fv.shape), stream);
  const ArrayView gv = typed(g, "g", Spec().on(fv).dtype(kF32).shape({L.cols}), stream);
  const ArrayView outv =
      typed(out, "out", Spec().on(fv).dtype(kF64).shape({L.rows, L.segments, 4}).writable(),
            stream);
  require_disjoint({&outv}, {&fv, &lv, &gv, &lay.offsets, &lay.twinned});
  SuperFedReduceArgs a{L, fv.as<const float>(), lv.as<const float>(), gv.as<const float>(),
                       outv.as<double>()};
  run_on_device(fv, stream, [&] { throw_if_failed(cpu::superfed_reduce(a)); },
                [&](void* s) { throw_if_failed(cuda::superfed_reduce(a, s)); });
}

void superfed_step(py::handle f, py::handle l, py::handle g, py::handle grad, py::handle buf_f,
                   py::handle buf_l, py::handle lam, py::handle lam_next, py::handle mixed,
                   py::handle prox, py::handle orth, py::handle active, py::handle offsets,
                   py::handle twinned, double lr, double momentum, double weight_decay,
                   bool train_local, int64_t stream, const std::string& mixed_name) {
  const ArrayView fv = view(f, "f", stream);
  const Layout lay = layout_of(fv, offsets, twinned, stream);
  const SuperFedLayout& L = lay.L;
  require_writable(fv);
  const bool step = !grad.is_none();
  const Spec state = Spec().on(fv).dtype(kF32).shape(fv.shape);  // [m, P] float32, like f
  const Spec written = Spec(state).writable();
  const Spec per_segment = Spec().on(fv).dtype(kF64).shape({L.rows, L.segments});
  const ArrayView lv = typed(l, "l", train_local && step ? written : state, stream);
  const ArrayView mixv = typed(mixed, mixed_name, written, stream);
  const ArrayView lamv = typed(lam, "lam", per_segment, stream);
  ArrayView nextv, gradv, buffv, buflv, gv, proxv, orthv, actv;
  if (!lam_next.is_none()) nextv = typed(lam_next, "lam_next", per_segment, stream);
  if (step) {
    if (!(lr >= 0.0) || !(momentum >= 0.0) || !(weight_decay >= 0.0))
      throw py::value_error("lr, momentum and weight_decay must be >= 0");
    gradv = typed(grad, "grad", state, stream);
    buffv = typed(buf_f, "buf_f", written, stream);
    buflv = typed(buf_l, "buf_l", written, stream);
    gv = typed(g, "g", Spec().on(fv).dtype(kF32).shape({L.cols}), stream);
    proxv = typed(prox, "prox", per_segment, stream);
    orthv = typed(orth, "orth", Spec().on(fv).dtype(kF64).shape({L.rows, 4}), stream);
    actv = typed(active, "active", Spec().on(fv).dtype(kByte).shape({L.rows}), stream);
  }
  // A mix writes only mixed; a step also f, the momentum buffers and (train_local) l.
  const bool l_written = step && train_local;
  require_disjoint({&mixv, step ? &fv : nullptr, &buffv, &buflv, l_written ? &lv : nullptr},
                   {step ? nullptr : &fv, l_written ? nullptr : &lv, &gradv, &gv, &lamv, &nextv,
                    &proxv, &orthv, &actv, &lay.offsets, &lay.twinned});
  SuperFedStepArgs a{};
  a.layout = L;
  a.f = fv.as<float>();
  a.l = lv.as<float>();
  a.mixed = mixv.as<float>();
  a.lam = lamv.as<const double>();
  a.lam_next = nextv.as<const double>();
  a.grad = gradv.as<const float>();
  a.buf_f = buffv.as<float>();
  a.buf_l = buflv.as<float>();
  a.g = gv.as<const float>();
  a.prox = proxv.as<const double>();
  a.orth = orthv.as<const double>();
  a.active = actv.as<const uint8_t>();
  a.lr = lr;
  a.momentum = momentum;
  a.weight_decay = weight_decay;
  a.train_local = train_local;
  run_on_device(fv, stream, [&] { throw_if_failed(cpu::superfed_step(a)); },
                [&](void* s) { throw_if_failed(cuda::superfed_step(a, s)); });
}

void register_superfed(py::module_& m) {
  m.def("superfed_reduce", &superfed_reduce, py::arg("f"), py::arg("l"), py::arg("g"),
        py::arg("offsets"), py::arg("twinned"), py::arg("out"), py::arg("stream"),
        "Per row and segment: <f, l>, |f|^2, |l|^2, |f - g|^2; see fastfair.ops.superfed_reduce.");
  m.def("superfed_step", &superfed_step, py::arg("f"), py::arg("l"), py::arg("g"),
        py::arg("grad"), py::arg("buf_f"), py::arg("buf_l"), py::arg("lam"), py::arg("lam_next"),
        py::arg("mixed"), py::arg("prox"), py::arg("orth"), py::arg("active"), py::arg("offsets"),
        py::arg("twinned"), py::arg("lr"), py::arg("momentum"), py::arg("weight_decay"),
        py::arg("train_local"), py::arg("stream"), py::arg("mixed_name"),
        "Fused SuPerFed update of (f, l) and the next mixed model; see "
        "fastfair.ops.superfed_step. mixed_name: what errors call mixed (superfed_mix's out).");
}
FASTFAIR_REGISTER(register_superfed);

}  // namespace
}  // namespace fastfair::binding
