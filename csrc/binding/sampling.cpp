// Binding of O(m) client sampling and Bernoulli availability.
#include "array.h"
#include "dlpack.h"
#include "fastfair/sampling.h"
#include "ids.h"
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
  ArrayView iv = view(ids, "out", stream);
  require_cuda_built(iv, "out");
  require_int64(iv, "out");
  require_writable(iv, "out");
  if (iv.ndim() != 1 || iv.numel() != m)
    throw py::value_error("out must have shape [m] = [" + std::to_string(m) + "]");
  auto* out = static_cast<int64_t*>(iv.data);
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
  ArrayView mv = view(mask, "out", stream);
  require_cuda_built(mv, "out");
  if (!((mv.dlpack_code == kDLBool || mv.dlpack_code == kDLUInt) && mv.dlpack_bits == 8))
    throw py::value_error("out must have dtype bool or uint8; got " + mv.dtype_str());
  require_contiguous(mv, "out");
  require_writable(mv, "out");
  if (mv.ndim() != 1) throw py::value_error("out must have shape [K]");
  const int64_t K = mv.shape[0];
  AvailabilityArgs a{K, nullptr, DType::f64, prob_scalar, seed, uint32_t(round),
                     static_cast<uint8_t*>(mv.data)};
  ArrayView pv;
  if (!prob.is_none()) {
    pv = view(prob, "prob", stream);
    require_same_device(pv, "prob", mv, "out");
    if (!pv.is_float || (pv.dtype != DType::f32 && pv.dtype != DType::f64))
      throw py::value_error("prob must be float32 or float64; got " + pv.dtype_str());
    require_contiguous(pv, "prob");
    if (pv.ndim() != 1 || pv.shape[0] != K)
      throw py::value_error("prob must have shape [K] = [" + std::to_string(K) + "]");
    a.prob = pv.data;
    a.prob_dtype = pv.dtype;
  } else if (!(prob_scalar >= 0.0 && prob_scalar <= 1.0)) {
    throw py::value_error("prob must be in [0, 1]; got " + std::to_string(prob_scalar));
  }
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
