// Binding of the cohort's local SGD of multinomial logistic regression (CPU).
#include <cmath>
#include <string>

#include "array.h"
#include "fastfair/softmax_regression.h"
#include "ids.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

void require_cpu(const ArrayView& v, const std::string& name) {
  if (v.device != Device::cpu)
    throw py::value_error(name + " is on " + v.device_str() +
                          ": softmax_regression_sgd runs on the CPU (on a GPU the simulator "
                          "trains through torch)");
}

ArrayView int64_vector(py::handle obj, const std::string& name, int64_t length,
                       const std::string& shape) {
  ArrayView v = view(obj, name, -1);
  require_cpu(v, name);
  require_int64(v, name);
  if (v.ndim() != 1 || v.shape[0] != length)
    throw py::value_error(name + " must have shape " + shape + " = [" + std::to_string(length) +
                          "]");
  return v;
}

void softmax_regression_sgd(py::handle x, py::handle y, py::handle offsets, py::handle keys,
                            py::handle clients, py::handle steps, py::handle params,
                            int64_t batch_size, double lr, py::handle received_loss) {
  ArrayView xv = view(x, "x", -1);
  require_cpu(xv, "x");
  require_dtype(xv, "x", DType::f32);
  if (xv.ndim() != 2) throw py::value_error("x must have shape [N, F]");
  require_contiguous(xv, "x");
  const int64_t N = xv.shape[0], F = xv.shape[1];
  ArrayView yv = int64_vector(y, "y", N, "[N]");
  ArrayView kv = view(keys, "keys", -1);
  require_cpu(kv, "keys");
  require_int64(kv, "keys");
  if (kv.ndim() != 1) throw py::value_error("keys must have shape [K]");
  const int64_t K = kv.shape[0];
  ArrayView ov = int64_vector(offsets, "offsets", K + 1, "[K + 1]");
  check_offsets(static_cast<const int64_t*>(ov.data), K, N, "x's rows");
  ArrayView pv = view(params, "params", -1);
  require_cpu(pv, "params");
  require_dtype(pv, "params", DType::f32);
  require_writable(pv, "params");
  if (pv.ndim() != 2) throw py::value_error("params must have shape [R, F C + C]");
  require_contiguous(pv, "params");
  const int64_t R = pv.shape[0];
  if (pv.shape[1] % (F + 1) != 0 || pv.shape[1] == 0)
    throw py::value_error("params must have shape [R, F C + C] with F = " + std::to_string(F) +
                          "; got " + std::to_string(pv.shape[1]) + " columns");
  const int64_t C = pv.shape[1] / (F + 1);
  ArrayView cv = int64_vector(clients, "clients", R, "[R]");
  ArrayView sv = int64_vector(steps, "steps", R, "[R]");
  const auto* client = static_cast<const int64_t*>(cv.data);
  const auto* step = static_cast<const int64_t*>(sv.data);
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
  double* loss = nullptr;
  ArrayView lv;
  if (!received_loss.is_none()) {
    lv = view(received_loss, "received_loss", -1);
    require_cpu(lv, "received_loss");
    require_dtype(lv, "received_loss", DType::f64);
    require_writable(lv, "received_loss");
    if (lv.ndim() != 1 || lv.shape[0] != R)
      throw py::value_error("received_loss must have shape [R] = [" + std::to_string(R) + "]");
    require_contiguous(lv, "received_loss");
    loss = static_cast<double*>(lv.data);
  }
  const SoftmaxRegressionArgs a{R, K, F, C, batch_size, float(lr),
                                static_cast<const float*>(xv.data),
                                static_cast<const int64_t*>(yv.data),
                                static_cast<const int64_t*>(ov.data),
                                static_cast<const int64_t*>(kv.data), client, step,
                                static_cast<float*>(pv.data), loss};
  Status status;
  {
    py::gil_scoped_release release;
    status = cpu::softmax_regression_sgd(a);
  }
  throw_value_error_if_failed(status);
}

void register_softmax_regression(py::module_& m) {
  m.def("softmax_regression_sgd", &softmax_regression_sgd, py::arg("x"), py::arg("y"),
        py::arg("offsets"), py::arg("keys"), py::arg("clients"), py::arg("steps"),
        py::arg("params"), py::arg("batch_size"), py::arg("lr"), py::arg("received_loss"),
        "Local minibatch SGD of multinomial logistic regression for a cohort, in place; see "
        "fastfair.ops.softmax_regression_sgd.");
}
FASTFAIR_REGISTER(register_softmax_regression);

}  // namespace
}  // namespace fastfair::binding
