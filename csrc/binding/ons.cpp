// Binding of the simplex QP solvers and the Online Newton Step round (fastfair/ons.h).
#include <string>
#include <vector>

#include "array.h"
#include "fastfair/ons.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

// A float64, C-contiguous array of exactly `shape`.
ArrayView f64(py::handle obj, const std::string& name, const std::vector<int64_t>& shape,
              bool writable, int64_t stream = -1) {
  ArrayView v = view(obj, name, stream);
  require_dtype(v, name, DType::f64);
  require_cuda_built(v, name);
  if (v.shape != shape) {
    std::string want = "[";
    for (size_t k = 0; k < shape.size(); ++k) want += (k ? ", " : "") + std::to_string(shape[k]);
    throw py::value_error(name + " must have shape " + want + "]");
  }
  require_contiguous(v, name);
  if (writable) require_writable(v, name);
  return v;
}

ArrayView host_f64(py::handle obj, const std::string& name, const std::vector<int64_t>& shape,
                   bool writable) {
  ArrayView v = f64(obj, name, shape, writable);
  if (v.device != Device::cpu)
    throw py::value_error(name + " must be a CPU array for this solver; got " + v.device_str());
  return v;
}

py::dict info_dict(const QpInfo& info) {
  py::dict d;
  d["kkt_residual"] = info.kkt_residual;
  d["nu"] = info.nu;
  d["iterations"] = info.iterations;
  d["support_size"] = info.support_size;
  d["refactorizations"] = info.refactorizations;
  d["converged"] = info.converged;
  return d;
}

int64_t square_size(py::handle H) {
  ArrayView hv = view(H, "H", -1);
  if (hv.ndim() != 2 || hv.shape[0] != hv.shape[1] || hv.shape[0] < 1)
    throw py::value_error("H must be a square matrix [K, K] with K >= 1");
  return hv.shape[0];
}

py::dict simplex_qp(py::handle H, py::handle b, py::object warm, py::handle p, int64_t max_iter) {
  const int64_t K = square_size(H);
  ArrayView hv = host_f64(H, "H", {K, K}, false);
  ArrayView bv = host_f64(b, "b", {K}, false);
  ArrayView pv = host_f64(p, "out", {K}, true);
  ArrayView wv;
  const double* warm_ptr = nullptr;
  if (!warm.is_none()) {
    wv = host_f64(warm, "warm_start", {K}, false);
    warm_ptr = static_cast<const double*>(wv.data);
  }
  SimplexQpArgs args{static_cast<const double*>(hv.data), static_cast<const double*>(bv.data), K,
                     warm_ptr, max_iter, static_cast<double*>(pv.data)};
  QpInfo info;
  Status st;
  {
    py::gil_scoped_release release;
    st = cpu::simplex_qp(args, &info);
  }
  throw_if_failed(st);
  return info_dict(info);
}

void simplex_qp_batched(py::handle H, py::handle b, py::handle p, py::handle kkt,
                        py::handle iterations, py::handle support, int method, int64_t max_iter,
                        double tol, int64_t stream) {
  ArrayView hv0 = view(H, "H", stream);
  if (hv0.ndim() != 3 || hv0.shape[1] != hv0.shape[2] || hv0.shape[1] < 1)
    throw py::value_error("H must have shape [B, K, K] with K >= 1");
  const int64_t B = hv0.shape[0], K = hv0.shape[1];
  ArrayView hv = f64(H, "H", {B, K, K}, false, stream);
  ArrayView bv = f64(b, "b", {B, K}, false, stream);
  ArrayView pv = f64(p, "out", {B, K}, true, stream);
  ArrayView kv = f64(kkt, "kkt", {B}, true, stream);
  require_same_device(bv, "b", hv, "H");
  require_same_device(pv, "out", hv, "H");
  require_same_device(kv, "kkt", hv, "H");
  ArrayView iv = view(iterations, "iterations", stream), sv = view(support, "support", stream);
  for (ArrayView* v : {&iv, &sv}) {
    const std::string name = v == &iv ? "iterations" : "support";
    if (v->dlpack_code != 0 || v->dlpack_bits != 64 || v->shape != std::vector<int64_t>{B})
      throw py::value_error(name + " must be an int64 array of shape [" + std::to_string(B) + "]");
    require_same_device(*v, name, hv, "H");
    require_contiguous(*v, name);
    require_writable(*v, name);
  }
  if (method != 0 && method != 1) throw py::value_error("method must be 0 or 1");
  SimplexQpBatchArgs args{static_cast<const double*>(hv.data), static_cast<const double*>(bv.data),
                          B, K, method, max_iter, tol, static_cast<double*>(pv.data),
                          static_cast<double*>(kv.data), static_cast<int64_t*>(iv.data),
                          static_cast<int64_t*>(sv.data)};
  if (B == 0) return;
  run_on_device(hv, stream, [&] { throw_if_failed(cpu::simplex_qp_batched(args)); },
                [&](void* s) {
                  if (method != 1)
                    throw std::runtime_error("the CUDA solver is FISTA only (method 1)");
                  throw_if_failed(cuda::simplex_qp_batched(args, s));
                });
}

// The arrays of an OnlineNewtonStep's state (fastfair/ops/ons.py), all writable.
struct OnsState {
  int64_t K;
  ArrayView H, Hinv, pending_u, pending_c, pending_g, b, p;
};

OnsState ons_state(py::handle H, py::handle Hinv, py::handle pending_u, py::handle pending_c,
                   py::handle pending_g, py::handle b, py::handle p) {
  const int64_t K = square_size(H);
  return OnsState{K, host_f64(H, "H", {K, K}, true), host_f64(Hinv, "Hinv", {K, K}, true),
                  host_f64(pending_u, "pending_u", {K}, true),
                  host_f64(pending_c, "pending_c", {1}, true),
                  host_f64(pending_g, "pending_g", {K}, true), host_f64(b, "b", {K}, true),
                  host_f64(p, "p", {K}, true)};
}

double* f64_data(const ArrayView& v) { return static_cast<double*>(v.data); }

py::dict ons_step(py::handle H, py::handle Hinv, py::handle pending_u, py::handle pending_c,
                  py::handle pending_g, py::handle b, py::handle p, py::handle g, double beta,
                  bool paper, double tol, int64_t max_iter) {
  const OnsState s = ons_state(H, Hinv, pending_u, pending_c, pending_g, b, p);
  ArrayView gv = host_f64(g, "g", {s.K}, false);
  OnsStepArgs args{s.K, f64_data(s.H), f64_data(s.Hinv), f64_data(s.pending_u),
                   f64_data(s.pending_c), f64_data(s.pending_g), f64_data(s.b), f64_data(s.p),
                   static_cast<const double*>(gv.data), beta, paper, tol, max_iter};
  QpInfo info;
  Status st;
  {
    py::gil_scoped_release release;
    st = cpu::ons_step(args, &info);
  }
  throw_value_error_if_failed(st);
  return info_dict(info);
}

void ons_settle(py::handle H, py::handle Hinv, py::handle pending_u, py::handle pending_c,
                py::handle pending_g, double beta) {
  const int64_t K = square_size(H);
  ArrayView hv = host_f64(H, "H", {K, K}, true), iv = host_f64(Hinv, "Hinv", {K, K}, true);
  ArrayView uv = host_f64(pending_u, "pending_u", {K}, false);
  ArrayView cv = host_f64(pending_c, "pending_c", {1}, true);
  ArrayView gv = host_f64(pending_g, "pending_g", {K}, true);
  OnsSettleArgs args{K, f64_data(hv), f64_data(iv), static_cast<const double*>(uv.data),
                     f64_data(cv), f64_data(gv), beta};
  py::gil_scoped_release release;
  throw_if_failed(cpu::ons_settle(args));
}

void register_ons(py::module_& m) {
  m.def("simplex_qp", &simplex_qp, py::arg("H"), py::arg("b"), py::arg("warm"), py::arg("out"),
        py::arg("max_iter"),
        "Exact argmin over the simplex of 1/2 p'Hp - b'p (active set); returns the certificate.");
  m.def("simplex_qp_batched", &simplex_qp_batched, py::arg("H"), py::arg("b"), py::arg("out"),
        py::arg("kkt"), py::arg("iterations"), py::arg("support"), py::arg("method"),
        py::arg("max_iter"), py::arg("tol"), py::arg("stream"),
        "B independent simplex QPs: H [B, K, K], b [B, K] -> out [B, K]; see fastfair.ops.");
  m.def("ons_step", &ons_step, py::arg("H"), py::arg("Hinv"), py::arg("pending_u"),
        py::arg("pending_c"), py::arg("pending_g"), py::arg("b"), py::arg("p"), py::arg("g"),
        py::arg("beta"), py::arg("paper"), py::arg("tol"), py::arg("max_iter"),
        "One Online Newton Step round on maintained state (in place); returns the certificate. "
        "A round that raises leaves the state logically unchanged.");
  m.def("ons_settle", &ons_settle, py::arg("H"), py::arg("Hinv"), py::arg("pending_u"),
        py::arg("pending_c"), py::arg("pending_g"), py::arg("beta"),
        "Folds the pending rank-1 terms of an ONS state into H and Hinv (in place).");
}
FASTFAIR_REGISTER(register_ons);

}  // namespace
}  // namespace fastfair::binding
