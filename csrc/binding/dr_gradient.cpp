// Binding of AAggFF-D's doubly-robust gradient: the dense O(K) form and the lazy O(m) round.
#include <cmath>

#include "array.h"
#include "fastfair/dr_gradient.h"
#include "ids.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

DrVariant parse_variant(const std::string& v) {
  if (v == "paper") return DrVariant::paper;
  if (v == "reference_code") return DrVariant::reference_code;
  throw py::value_error("variant must be 'paper' or 'reference_code'; got '" + v + "'");
}

ArrayView f64_vector(py::handle obj, const std::string& name, const ArrayView& ref,
                     const std::string& ref_name, int64_t n, int64_t stream, bool writable) {
  ArrayView v = view(obj, name, stream);
  require_same_device(v, name, ref, ref_name);
  require_dtype(v, name, DType::f64);
  if (v.numel() > 0) require_contiguous(v, name);  // empty exports may carry any strides
  if (writable) require_writable(v, name);
  if (v.ndim() != 1 || v.shape[0] != n)
    throw py::value_error(name + " must have shape [" + std::to_string(n) + "]");
  return v;
}

// The per-client float64 vector [K] (K >= 1) a round reads or updates: p, or the lazy state D.
ArrayView client_vector(py::handle obj, const std::string& name, int64_t stream, bool writable) {
  ArrayView v = view(obj, name, stream);
  require_cuda_built(v, name);
  require_dtype(v, name, DType::f64);
  require_contiguous(v, name);
  if (writable) require_writable(v, name);
  if (v.ndim() != 1 || v.shape[0] == 0) throw py::value_error(name + " must have shape [K], K >= 1");
  return v;
}

void check_round(double sample_prob) {
  if (!(sample_prob > 0.0 && sample_prob <= 1.0))
    throw py::value_error("sample_prob must be in (0, 1]; got " + std::to_string(sample_prob));
}

// The ids [m] (int64) and responses [m] (float64) of one round, on `ref`'s device and checked
// against K clients (CPU arrays only: CUDA ids are not inspected).
struct Sample {
  ArrayView ids, responses;
  int64_t m;
};

Sample sample_of(py::handle ids, py::handle responses, const ArrayView& ref,
                 const std::string& ref_name, int64_t K, int64_t stream) {
  Sample s;
  s.ids = view(ids, "ids", stream);
  require_same_device(s.ids, "ids", ref, ref_name);
  require_int64(s.ids, "ids");
  if (s.ids.ndim() != 1) throw py::value_error("ids must have shape [m]");
  s.m = s.ids.shape[0];
  s.responses = f64_vector(responses, "responses", ref, ref_name, s.m, stream, false);
  if (s.ids.device == Device::cpu) {
    check_ids(static_cast<const int64_t*>(s.ids.data), s.m, K, "ids");
    check_finite(static_cast<const double*>(s.responses.data), s.m, "responses");
  }
  return s;
}

void dr_gradient(py::handle responses, py::handle ids, py::handle p, double sample_prob,
                 const std::string& variant, py::handle grad, py::handle estimate,
                 py::handle workspace, int64_t stream) {
  const DrVariant var = parse_variant(variant);
  check_round(sample_prob);
  ArrayView pv = client_vector(p, "p", stream, false);
  const int64_t K = pv.shape[0];
  const Sample sample = sample_of(ids, responses, pv, "p", K, stream);
  const int64_t m = sample.m;
  if (m == 0) throw py::value_error("ids is empty: the DR estimate needs at least one sampled client");
  ArrayView gv = f64_vector(grad, "out", pv, "p", K, stream, true);
  DrDenseArgs a{K, m, static_cast<const int64_t*>(sample.ids.data),
                static_cast<const double*>(sample.responses.data),
                static_cast<const double*>(pv.data), sample_prob, var,
                static_cast<double*>(gv.data), nullptr, nullptr};
  ArrayView ev, wv;
  if (!estimate.is_none()) {
    ev = f64_vector(estimate, "estimate", pv, "p", K, stream, true);
    a.estimate = static_cast<double*>(ev.data);
  }
  if (pv.device == Device::cuda) {
    wv = view(workspace, "workspace", stream);
    require_dtype(wv, "workspace", DType::f64);
    if (wv.numel() < dr_dense_workspace_len(K))
      throw py::value_error("workspace is too small; allocate dr_dense_workspace_len(K) doubles");
    a.workspace = static_cast<double*>(wv.data);
  }
  run_on_device(pv, stream, [&] { throw_value_error_if_failed(cpu::dr_gradient(a)); },
                [&](void* s) { throw_if_failed(cuda::dr_gradient(a, s)); });
}

void dr_lazy_step(py::handle state, py::handle ids, py::handle responses, double sample_prob,
                  double eta, double prior_mass, const std::string& variant, py::handle weights,
                  int64_t stream) {
  const DrVariant var = parse_variant(variant);
  check_round(sample_prob);
  if (!std::isfinite(eta)) throw py::value_error("eta must be finite; got " + std::to_string(eta));
  if (!(prior_mass > 0.0 && std::isfinite(prior_mass)))
    throw py::value_error("prior_mass must be positive and finite; got " +
                          std::to_string(prior_mass));
  ArrayView sv = client_vector(state, "state", stream, true);
  const int64_t K = sv.shape[0];
  const Sample sample = sample_of(ids, responses, sv, "state", K, stream);
  const int64_t m = sample.m;
  ArrayView wv = f64_vector(weights, "out", sv, "state", m, stream, true);
  DrLazyArgs a{K, m, static_cast<const int64_t*>(sample.ids.data),
               static_cast<const double*>(sample.responses.data),
               sample_prob, eta, prior_mass, var, static_cast<double*>(sv.data),
               static_cast<double*>(wv.data)};
  run_on_device(sv, stream, [&] { throw_value_error_if_failed(cpu::dr_lazy_step(a)); },
                [&](void* s) { throw_if_failed(cuda::dr_lazy_step(a, s)); });
}

void register_dr(py::module_& m) {
  m.def("dr_gradient", &dr_gradient, py::arg("responses"), py::arg("ids"), py::arg("p"),
        py::arg("sample_prob"), py::arg("variant"), py::arg("out"), py::arg("estimate"),
        py::arg("workspace"), py::arg("stream"),
        "AAggFF-D's DR estimate and linearised gradient for all K clients; see fastfair.ops.");
  m.def("dr_lazy_step", &dr_lazy_step, py::arg("state"), py::arg("ids"), py::arg("responses"),
        py::arg("sample_prob"), py::arg("eta"), py::arg("prior_mass"), py::arg("variant"),
        py::arg("out"), py::arg("stream"),
        "AAggFF-D's O(m) lazy round: state[ids] += delta, weights = softmax(-eta * state[ids]).");
  m.def("dr_dense_workspace_len", &dr_dense_workspace_len, py::arg("num_clients"),
        "Doubles of device scratch the CUDA dr_gradient needs for K clients.");
}
FASTFAIR_REGISTER(register_dr);

}  // namespace
}  // namespace fastfair::binding
