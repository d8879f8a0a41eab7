// Binding of the fused SGLD step and the FedEvg server step.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "array.h"
#include "fastfair/sgld.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

// x, grad, out (and G's clients): C-contiguous float32/float64 arrays of one shape [N, ...] on
// one device.
const Spec kState = Spec().dtype(kF32or64);

// `v` must be an array of x's device, dtype and shape.
void check_like(const ArrayView& v, const ArrayView& x) {
  require_same_device(v, x);
  require_same_dtype(v, x);
  kState.check(v);
  if (v.shape != x.shape) throw py::value_error(v.name + " must have the shape of " + x.name);
}

// The optional per-sample step and noise vectors of a Langevin update: [N] float64 on x's
// device (empty views for None), pointed to by u.
struct PerSample {
  ArrayView step, noise;
};

PerSample per_sample(LangevinArgs& u, py::handle step_vec, py::handle noise_vec,
                     const ArrayView& x, int64_t n, int64_t stream) {
  const Spec spec = Spec().on(x).dtype(kF64).shape({n}, "[N]");
  PerSample p;
  if (!step_vec.is_none()) p.step = typed(step_vec, "step", spec, stream);
  if (!noise_vec.is_none()) p.noise = typed(noise_vec, "noise_std", spec, stream);
  u.step_vec = p.step.as<const double>();
  u.noise_vec = p.noise.as<const double>();
  return p;
}

LangevinArgs langevin(double step, double noise, double grad_clip, double lo, double hi,
                      uint64_t seed, uint64_t offset) {
  if (!std::isfinite(step)) throw py::value_error("step must be finite; got " + std::to_string(step));
  if (!(noise >= 0.0) || !std::isfinite(noise))
    throw py::value_error("noise_std must be finite and >= 0; got " + std::to_string(noise));
  if (!(grad_clip > 0.0))
    throw py::value_error("grad_clip must be > 0 (or None for no clip); got " +
                          std::to_string(grad_clip));
  if (!(lo <= hi))
    throw py::value_error("clamp must be (lo, hi) with lo <= hi; got (" + std::to_string(lo) +
                          ", " + std::to_string(hi) + ")");
  return {step, nullptr, noise, nullptr, grad_clip, lo, hi, seed, offset};
}

// out_name: "out", or "x" when the caller updates x in place (out is x).
void sgld_step(py::handle x, py::handle grad, py::handle out, double step, py::handle step_vec,
               double noise, py::handle noise_vec, double grad_clip, double lo, double hi,
               uint64_t seed, uint64_t offset, int64_t stream, const std::string& out_name) {
  const ArrayView xv = typed(x, "x", kState, stream);
  if (xv.ndim() < 1) throw py::value_error("x must have shape [N, ...]; got a 0-d array");
  const ArrayView gv = view(grad, "grad", stream), ov = view(out, out_name, stream);
  check_like(gv, xv);
  check_like(ov, xv);
  require_writable(ov);
  const int64_t n = xv.shape[0], total = xv.numel();
  SgldArgs a{xv.dtype, n, n ? total / n : 0, xv.data, gv.data, ov.data,
             langevin(step, noise, grad_clip, lo, hi, seed, offset)};
  const PerSample ps = per_sample(a.u, step_vec, noise_vec, xv, n, stream);
  require_disjoint({&ov}, {&xv, &gv, &ps.step, &ps.noise}, {&ov, &xv});  // out = x: in place
  if (total == 0) return;
  run_on_device(xv, stream, [&] { throw_value_error_if_failed(cpu::sgld_step(a)); },
                [&](void* s) { throw_if_failed(cuda::sgld_step(a, s)); });
}

void fedevg_server_step(py::handle x, py::handle G, py::handle e, py::handle w, py::handle out,
                        double step, py::handle step_vec, double noise, py::handle noise_vec,
                        double grad_clip, double lo, double hi, uint64_t seed, uint64_t offset,
                        int64_t stream, const std::string& out_name) {
  const ArrayView xv = typed(x, "x", kState, stream);
  if (xv.ndim() < 1) throw py::value_error("x must have shape [M, ...]; got a 0-d array");
  const ArrayView ov = view(out, out_name, stream);
  check_like(ov, xv);
  require_writable(ov);
  const ArrayView Gv = view(G, "G", stream);
  require_same_device(Gv, xv);
  require_same_dtype(Gv, xv);
  kState.check(Gv);
  if (Gv.ndim() != xv.ndim() + 1 ||
      !std::equal(xv.shape.begin(), xv.shape.end(), Gv.shape.begin() + 1))
    throw py::value_error("G must have shape [m, *x.shape]: one energy gradient per client and "
                          "synthetic sample");
  const int64_t m = Gv.shape[0], M = xv.shape[0];
  if (m < 1) throw py::value_error("G must hold at least one client (m >= 1)");
  const ArrayView ev = typed(e, "e", Spec().on(xv).dtype(kF64).shape({m, M}, "[m, M]"), stream);
  const ArrayView wv = typed(w, "w", Spec().on(xv).dtype(kF64).shape({m}, "[m]"), stream);
  const int64_t total = xv.numel();
  FedEvgServerArgs a{xv.dtype, m, M, M ? total / M : 0, xv.data, Gv.data, ev.as<const double>(),
                     wv.as<const double>(), ov.data,
                     langevin(step, noise, grad_clip, lo, hi, seed, offset)};
  const PerSample ps = per_sample(a.u, step_vec, noise_vec, xv, M, stream);
  require_disjoint({&ov}, {&xv, &Gv, &ev, &wv, &ps.step, &ps.noise}, {&ov, &xv});  // in place
  if (total == 0) return;
  run_on_device(xv, stream, [&] { throw_value_error_if_failed(cpu::fedevg_server_step(a)); },
                [&](void* s) { throw_if_failed(cuda::fedevg_server_step(a, s)); });
}

void register_sgld(py::module_& m) {
  m.def("sgld_step", &sgld_step, py::arg("x"), py::arg("grad"), py::arg("out"), py::arg("step"),
        py::arg("step_vec"), py::arg("noise"), py::arg("noise_vec"), py::arg("grad_clip"),
        py::arg("lo"), py::arg("hi"), py::arg("seed"), py::arg("offset"), py::arg("stream"),
        py::arg("out_name"),
        "out = clamp(x - step * clip(grad) + noise * z), z Philox normals keyed by (seed, "
        "offset); see fastfair.ops.sgld_step. out_name: what errors call out ('x' in place).");
  m.def("fedevg_server_step", &fedevg_server_step, py::arg("x"), py::arg("G"), py::arg("e"),
        py::arg("w"), py::arg("out"), py::arg("step"), py::arg("step_vec"), py::arg("noise"),
        py::arg("noise_vec"), py::arg("grad_clip"), py::arg("lo"), py::arg("hi"), py::arg("seed"),
        py::arg("offset"), py::arg("stream"), py::arg("out_name"),
        "Self-normalised client mixture of energy gradients, then the Langevin step; see "
        "fastfair.ops.fedevg_server_step. out_name: what errors call out ('x' in place).");
}
FASTFAIR_REGISTER(register_sgld);

}  // namespace
}  // namespace fastfair::binding
