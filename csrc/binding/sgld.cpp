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

// x, grad, out: C-contiguous float32/float64 arrays of one shape [N, ...] on one device.
void check_state(const ArrayView& v, const std::string& name) {
  if (!v.is_float || (v.dtype != DType::f32 && v.dtype != DType::f64))
    throw py::value_error(name + " must be float32 or float64; got " + v.dtype_str());
  require_contiguous(v, name);
}

void check_like(const ArrayView& v, const std::string& name, const ArrayView& x,
                const std::string& x_name) {
  require_same_device(v, name, x, x_name);
  require_same_dtype(v, name, x, x_name);
  check_state(v, name);
  if (v.shape != x.shape) throw py::value_error(name + " must have the shape of " + x_name);
}

// Optional per-sample vector: [N] float64 contiguous on x's device.
const double* per_sample(py::handle obj, const std::string& name, const ArrayView& x, int64_t n,
                         int64_t stream, std::vector<ArrayView>& keep) {
  if (obj.is_none()) return nullptr;
  keep.push_back(view(obj, name, stream));
  const ArrayView& v = keep.back();
  require_same_device(v, name, x, "x");
  require_dtype(v, name, DType::f64);
  require_contiguous(v, name);
  if (v.ndim() != 1 || v.shape[0] != n)
    throw py::value_error(name + " must be one number or have shape [N] = [" + std::to_string(n) +
                          "]");
  return static_cast<const double*>(v.data);
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
  ArrayView xv = view(x, "x", stream);
  require_cuda_built(xv, "x");
  check_state(xv, "x");
  if (xv.ndim() < 1) throw py::value_error("x must have shape [N, ...]; got a 0-d array");
  ArrayView gv = view(grad, "grad", stream), ov = view(out, out_name, stream);
  check_like(gv, "grad", xv, "x");
  check_like(ov, out_name, xv, "x");
  require_writable(ov, out_name);
  const int64_t n = xv.shape[0], total = xv.numel();
  std::vector<ArrayView> keep;
  SgldArgs a{xv.dtype, n, n ? total / n : 0, xv.data, gv.data, ov.data,
             langevin(step, noise, grad_clip, lo, hi, seed, offset)};
  a.u.step_vec = per_sample(step_vec, "step", xv, n, stream, keep);
  a.u.noise_vec = per_sample(noise_vec, "noise_std", xv, n, stream, keep);
  if (total == 0) return;
  run_on_device(xv, stream, [&] { throw_value_error_if_failed(cpu::sgld_step(a)); },
                [&](void* s) { throw_if_failed(cuda::sgld_step(a, s)); });
}

void fedevg_server_step(py::handle x, py::handle G, py::handle e, py::handle w, py::handle out,
                        double step, py::handle step_vec, double noise, py::handle noise_vec,
                        double grad_clip, double lo, double hi, uint64_t seed, uint64_t offset,
                        int64_t stream, const std::string& out_name) {
  ArrayView xv = view(x, "x", stream);
  require_cuda_built(xv, "x");
  check_state(xv, "x");
  if (xv.ndim() < 1) throw py::value_error("x must have shape [M, ...]; got a 0-d array");
  ArrayView Gv = view(G, "G", stream), ev = view(e, "e", stream), wv = view(w, "w", stream);
  ArrayView ov = view(out, out_name, stream);
  check_like(ov, out_name, xv, "x");
  require_writable(ov, out_name);
  require_same_device(Gv, "G", xv, "x");
  require_same_dtype(Gv, "G", xv, "x");
  check_state(Gv, "G");
  if (Gv.ndim() != xv.ndim() + 1 ||
      !std::equal(xv.shape.begin(), xv.shape.end(), Gv.shape.begin() + 1))
    throw py::value_error("G must have shape [m, *x.shape]: one energy gradient per client and "
                          "synthetic sample");
  const int64_t m = Gv.shape[0], M = xv.shape[0];
  if (m < 1) throw py::value_error("G must hold at least one client (m >= 1)");
  for (auto [v, name] : {std::pair<const ArrayView*, const char*>{&ev, "e"}, {&wv, "w"}}) {
    require_same_device(*v, name, xv, "x");
    require_dtype(*v, name, DType::f64);
    require_contiguous(*v, name);
  }
  if (ev.ndim() != 2 || ev.shape[0] != m || ev.shape[1] != M)
    throw py::value_error("e must have shape [m, M] = [" + std::to_string(m) + ", " +
                          std::to_string(M) + "]");
  if (wv.ndim() != 1 || wv.shape[0] != m)
    throw py::value_error("w must have shape [m] = [" + std::to_string(m) + "]");
  std::vector<ArrayView> keep;
  const int64_t total = xv.numel();
  FedEvgServerArgs a{xv.dtype, m, M, M ? total / M : 0, xv.data, Gv.data,
                     static_cast<const double*>(ev.data), static_cast<const double*>(wv.data),
                     ov.data, langevin(step, noise, grad_clip, lo, hi, seed, offset)};
  a.u.step_vec = per_sample(step_vec, "step", xv, M, stream, keep);
  a.u.noise_vec = per_sample(noise_vec, "noise_std", xv, M, stream, keep);
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
