// Binding of O(m) client sampling and Bernoulli availability.
#include "array.h"
#include "fastfair/sampling.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

void check_seed_round(int64_t round) {
  if (round < 0 || round > int64_t(0xffffffff))
    throw py::value_error("round must be in [0, 2^32); got " + std::to_string(round));
}

void sample_clients(int64_t num_clients, int64_t m, uint64_t seed, int64_t round, py::handle ids,
                    int64_t stream) {
  check_seed_round(round);
  if (num_clients < 1) throw py::value_error("num_clients must be >= 1; got " + std::to_string(num_clients));
  if (m < 0 || m > num_clients)
    throw py::value_error("m must be in [0, num_clients] = [0, " + std::to_string(num_clients) +
                          "] (sampling without replacement); got " + std::to_string(m));
  const ArrayView iv = typed(ids, "out", Spec().dtype(kI64).shape({m}, "[m]").writable(), stream);
  auto* out = iv.as<int64_t>();
  run_on_device(
      iv, stream,
      [&] { throw_if_failed(cpu::sample_clients(num_clients, m, seed, uint32_t(round), out)); },
      [&](void* s) {
        throw_if_failed(cuda::sample_clients(num_clients, m, seed, uint32_t(round), out, s));
      });
}

// prob: None (use prob_scalar) or [K] float32/float64 on the mask's device.
void availability(py::handle prob, double prob_scalar, uint64_t seed, int64_t round,
                  py::handle mask, int64_t stream) {
  check_seed_round(round);
  const ArrayView mv = typed(mask, "out", Spec().dtype(kByte).shape({-1}, "[K]").writable(),
                             stream);
  const int64_t K = mv.shape[0];
  AvailabilityArgs a{K, nullptr, DType::f64, prob_scalar, seed, uint32_t(round),
                     mv.as<uint8_t>()};
  ArrayView pv;
  if (!prob.is_none()) {
    pv = typed(prob, "prob", Spec().on(mv).dtype(kF32or64).shape({K}, "[K]"), stream);
    a.prob = pv.data;
    a.prob_dtype = pv.dtype;
  } else if (!(prob_scalar >= 0.0 && prob_scalar <= 1.0)) {
    throw py::value_error("prob must be in [0, 1]; got " + std::to_string(prob_scalar));
  }
  require_disjoint({&mv}, {&pv});
  run_on_device(mv, stream, [&] { throw_if_failed(cpu::availability(a)); },
                [&](void* s) { throw_if_failed(cuda::availability(a, s)); });
}

void register_sampling(py::module_& m) {
  m.def("sample_clients", &sample_clients, py::arg("num_clients"), py::arg("m"), py::arg("seed"),
        py::arg("round"), py::arg("out"), py::arg("stream"),
        "m distinct client ids out of num_clients, a pure function of (seed, round); see "
        "fastfair.ops.sample_clients.");
  m.def("availability", &availability, py::arg("prob"), py::arg("prob_scalar"), py::arg("seed"),
        py::arg("round"), py::arg("out"), py::arg("stream"),
        "mask[i] = (u_i < prob_i) with Philox uniforms u keyed by (seed, round).");
}
FASTFAIR_REGISTER(register_sampling);

}  // namespace
}  // namespace fastfair::binding
