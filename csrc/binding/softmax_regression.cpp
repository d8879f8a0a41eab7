// Binding of the cohort's local SGD of multinomial logistic regression (CPU and CUDA).
#include <cmath>
#include <string>

#include "array.h"
#include "fastfair/softmax_regression.h"
#include "ids.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

// The arrays the host sizes a launch from: on the host wherever the model trains.
Spec host() {
  return Spec().cpu("the host sizes the launch from it (pass a NumPy array or a CPU tensor)");
}

void softmax_regression_sgd(py::handle x, py::handle y, py::handle offsets, py::handle keys,
                            py::handle clients, py::handle steps, py::handle params,
                            int64_t batch_size, double lr, py::handle received_loss,
                            int64_t stream) {
  const ArrayView xv = typed(x, "x", Spec().dtype(kF32).shape({-1, -1}, "[N, F]"), stream);
  const int64_t N = xv.shape[0], F = xv.shape[1];
  const Spec on_x = Spec().on(xv);
  const ArrayView yv = typed(y, "y", Spec(on_x).dtype(kI64).shape({N}, "[N]"), stream);
  const ArrayView kv = typed(keys, "keys", Spec(on_x).dtype(kI64).shape({-1}, "[K]"), stream);
  const int64_t K = kv.shape[0];
  const ArrayView ov = typed(offsets, "offsets", host().dtype(kI64).shape({K + 1}, "[K + 1]"));
  check_offsets(ov.as<const int64_t>(), K, N, "x's rows");
  const ArrayView pv = typed(
      params, "params", Spec(on_x).dtype(kF32).shape({-1, -1}, "[R, F C + C]").writable(), stream);
  const int64_t R = pv.shape[0];
  if (pv.shape[1] % (F + 1) != 0 || pv.shape[1] == 0)
    throw py::value_error("params must have shape [R, F C + C] with F = " + std::to_string(F) +
                          "; got " + std::to_string(pv.shape[1]) + " columns");
  const int64_t C = pv.shape[1] / (F + 1);
  if (C > 128)
    throw py::value_error("softmax_regression_sgd supports 1 to 128 classes; got " +
                          std::to_string(C));
  const ArrayView cv = typed(clients, "clients", host().dtype(kI64).shape({R}, "[R]"));
  const ArrayView sv = typed(steps, "steps", host().dtype(kI64).shape({R}, "[R]"));
  const auto* client = cv.as<const int64_t>();
  const auto* step = sv.as<const int64_t>();
  for (int64_t r = 0; r < R; ++r) {
    if (client[r] < 0 || client[r] >= K)
      throw py::value_error("clients[" + std::to_string(r) + "] = " + std::to_string(client[r]) +
                            " is out of range [0, " + std::to_string(K) + ")");
    if (step[r] < 0)
      throw py::value_error("steps[" + std::to_string(r) + "] must be >= 0; got " +
                            std::to_string(step[r]));
  }
  if (batch_size < 1)
    throw py::value_error("batch_size must be >= 1; got " + std::to_string(batch_size));
  if (!(lr > 0.0) || !std::isfinite(lr))
    throw py::value_error("lr must be finite and > 0; got " + std::to_string(lr));
  ArrayView lv;
  if (!received_loss.is_none())
    lv = typed(received_loss, "received_loss",
               Spec(on_x).dtype(kF64).shape({R}, "[R]").writable(), stream);
  require_disjoint({&pv, &lv}, {&xv, &yv, &ov, &kv, &cv, &sv});
  const SoftmaxRegressionArgs a{R, K, F, C, batch_size, float(lr), xv.as<const float>(),
                                yv.as<const int64_t>(), ov.as<const int64_t>(),
                                kv.as<const int64_t>(), client, step, pv.as<float>(),
                                lv.as<double>()};
  run_on_device(xv, stream, [&] { throw_value_error_if_failed(cpu::softmax_regression_sgd(a)); },
                [&](void* s) { throw_if_failed(cuda::softmax_regression_sgd(a, s)); });
}

void register_softmax_regression(py::module_& m) {
  m.def("softmax_regression_sgd", &softmax_regression_sgd, py::arg("x"), py::arg("y"),
        py::arg("offsets"), py::arg("keys"), py::arg("clients"), py::arg("steps"),
        py::arg("params"), py::arg("batch_size"), py::arg("lr"), py::arg("received_loss"),
        py::arg("stream"),
        "Local minibatch SGD of multinomial logistic regression for a cohort, in place; see "
        "fastfair.ops.softmax_regression_sgd.");
}
FASTFAIR_REGISTER(register_softmax_regression);

}  // namespace
}  // namespace fastfair::binding
