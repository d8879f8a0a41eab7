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

// The per-client float64 vector [K] (K >= 1) a round reads or updates: p, or the lazy state D.
ArrayView client_vector(py::handle obj, const std::string& name, int64_t stream, bool writable) {
  Spec spec = Spec().dtype(kF64).shape({-1}, "[K]");
  if (writable) spec.writable();
  ArrayView v = typed(obj, name, spec, stream);
  if (v.shape[0] == 0) throw py::value_error(name + " must have shape [K], K >= 1");
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

Sample sample_of(py::handle ids, py::handle responses, const ArrayView& ref, int64_t K,
                 int64_t stream) {
  Sample s;
  s.ids = typed(ids, "ids", Spec().on(ref).dtype(kI64).shape({-1}, "[m]"), stream);
  s.m = s.ids.shape[0];
  s.responses = typed(responses, "responses", Spec().on(ref).dtype(kF64).shape({s.m}), stream);
  if (s.ids.device == Device::cpu) {
    check_ids(s.ids.as<const int64_t>(), s.m, K, "ids");
    check_finite(s.responses.as<const double>(), s.m, "responses");
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
  const Sample sample = sample_of(ids, responses, pv, K, stream);
  const int64_t m = sample.m;
  if (m == 0) throw py::value_error("ids is empty: the DR estimate needs at least one sampled client");
  const Spec out_spec = Spec().on(pv).dtype(kF64).shape({K}).writable();
  ArrayView gv = typed(grad, "out", out_spec, stream);
  DrDenseArgs a{K, m, sample.ids.as<const int64_t>(), sample.responses.as<const double>(),
                pv.as<const double>(), sample_prob, var, gv.as<double>(), nullptr, nullptr};
  ArrayView ev, wv;
  if (!estimate.is_none()) {
    ev = typed(estimate, "estimate", out_spec, stream);
    a.estimate = ev.as<double>();
  }
  if (pv.device == Device::cuda) {
    wv = typed(workspace, "workspace", Spec().on(pv).dtype(kF64).writable(), stream);
    if (wv.numel() < dr_dense_workspace_len(K))
      throw py::value_error("workspace is too small; allocate dr_dense_workspace_len(K) doubles");
    a.workspace = wv.as<double>();
  }
  require_disjoint({&gv, &ev, &wv}, {&pv, &sample.ids, &sample.responses});
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
  const Sample sample = sample_of(ids, responses, sv, K, stream);
  const int64_t m = sample.m;
  ArrayView wv = typed(weights, "out", Spec().on(sv).dtype(kF64).shape({m}).writable(), stream);
  require_disjoint({&sv, &wv}, {&sample.ids, &sample.responses});
  DrLazyArgs a{K, m, sample.ids.as<const int64_t>(), sample.responses.as<const double>(),
               sample_prob, eta, prior_mass, var, sv.as<double>(), wv.as<double>()};
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
