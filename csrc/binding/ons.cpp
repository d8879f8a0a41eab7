// Binding of the simplex QP solvers and the Online Newton Step round (fastfair/ons.h).
#include <string>
#include <vector>

#include "array.h"
#include "fastfair/ons.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

// A float64 host array of `shape` (the active-set solver and the ONS round run on the CPU).
Spec host_f64(std::vector<int64_t> shape) {
  return Spec().cpu("this solver runs on the CPU; pass CPU arrays").dtype(kF64).shape(shape);
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
  const ArrayView hv = typed(H, "H", host_f64({K, K}));
  const ArrayView bv = typed(b, "b", host_f64({K}));
  const ArrayView pv = typed(p, "out", host_f64({K}).writable());
  ArrayView wv;
  if (!warm.is_none()) wv = typed(warm, "warm_start", host_f64({K}));
  require_disjoint({&pv}, {&hv, &bv, &wv});
  SimplexQpArgs args{hv.as<const double>(), bv.as<const double>(), K,
                     wv.as<const double>(), max_iter, pv.as<double>()};
  QpInfo info;
  throw_if_failed(released([&] { return cpu::simplex_qp(args, &info); }));
  return info_dict(info);
}

void simplex_qp_batched(py::handle H, py::handle b, py::handle p, py::handle kkt,
                        py::handle iterations, py::handle support, int method, int64_t max_iter,
                        double tol, int64_t stream) {
  ArrayView hv0 = view(H, "H", stream);
  if (hv0.ndim() != 3 || hv0.shape[1] != hv0.shape[2] || hv0.shape[1] < 1)
    throw py::value_error("H must have shape [B, K, K] with K >= 1");
  const int64_t B = hv0.shape[0], K = hv0.shape[1];
  const ArrayView hv = typed(H, "H", Spec().dtype(kF64).shape({B, K, K}), stream);
  const ArrayView bv = typed(b, "b", Spec().on(hv).dtype(kF64).shape({B, K}), stream);
  const ArrayView pv = typed(p, "out", Spec().on(hv).dtype(kF64).shape({B, K}).writable(), stream);
  const ArrayView kv = typed(kkt, "kkt", Spec().on(hv).dtype(kF64).shape({B}).writable(), stream);
  const Spec counts = Spec().on(hv).dtype(kI64).shape({B}).writable();
  const ArrayView iv = typed(iterations, "iterations", counts, stream);
  const ArrayView sv = typed(support, "support", counts, stream);
  require_disjoint({&pv, &kv, &iv, &sv}, {&hv, &bv});
  if (method != 0 && method != 1) throw py::value_error("method must be 0 or 1");
  SimplexQpBatchArgs args{hv.as<const double>(), bv.as<const double>(), B, K, method, max_iter,
                          tol, pv.as<double>(), kv.as<double>(), iv.as<int64_t>(),
                          sv.as<int64_t>()};
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
  return OnsState{K, typed(H, "H", host_f64({K, K}).writable()),
                  typed(Hinv, "Hinv", host_f64({K, K}).writable()),
                  typed(pending_u, "pending_u", host_f64({K}).writable()),
                  typed(pending_c, "pending_c", host_f64({1}).writable()),
                  typed(pending_g, "pending_g", host_f64({K}).writable()),
                  typed(b, "b", host_f64({K}).writable()), typed(p, "p", host_f64({K}).writable())};
}

py::dict ons_step(py::handle H, py::handle Hinv, py::handle pending_u, py::handle pending_c,
                  py::handle pending_g, py::handle b, py::handle p, py::handle g, double beta,
                  bool paper, double tol, int64_t max_iter) {
  const OnsState s = ons_state(H, Hinv, pending_u, pending_c, pending_g, b, p);
  const ArrayView gv = typed(g, "g", host_f64({s.K}));
  require_disjoint({&s.H, &s.Hinv, &s.pending_u, &s.pending_c, &s.pending_g, &s.b, &s.p}, {&gv});
  OnsStepArgs args{s.K, s.H.as<double>(), s.Hinv.as<double>(), s.pending_u.as<double>(),
                   s.pending_c.as<double>(), s.pending_g.as<double>(), s.b.as<double>(),
                   s.p.as<double>(), gv.as<const double>(), beta, paper, tol, max_iter};
  QpInfo info;
  throw_value_error_if_failed(released([&] { return cpu::ons_step(args, &info); }));
  return info_dict(info);
}

void ons_settle(py::handle H, py::handle Hinv, py::handle pending_u, py::handle pending_c,
                py::handle pending_g, double beta) {
  const int64_t K = square_size(H);
  const ArrayView hv = typed(H, "H", host_f64({K, K}).writable());
  const ArrayView iv = typed(Hinv, "Hinv", host_f64({K, K}).writable());
  const ArrayView uv = typed(pending_u, "pending_u", host_f64({K}));
  const ArrayView cv = typed(pending_c, "pending_c", host_f64({1}).writable());
  const ArrayView gv = typed(pending_g, "pending_g", host_f64({K}).writable());
  require_disjoint({&hv, &iv, &cv, &gv}, {&uv});
  OnsSettleArgs args{K, hv.as<double>(), iv.as<double>(), uv.as<const double>(), cv.as<double>(),
                     gv.as<double>(), beta};
  throw_if_failed(released([&] { return cpu::ons_settle(args); }));
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
