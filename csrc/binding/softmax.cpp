// Binding of log-sum-exp / softmax over rows and of the fused exponentiated-gradient step.
#include <pybind11/stl.h>

#include <algorithm>
#include <vector>

#include "array.h"
#include "fastfair/softmax.h"
#include "ids.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

struct Rows {
  int64_t rows, cols, stride;
};

// x is [K] or [B, K] with contiguous rows; float32 or float64. `ref`: the array x must be like
// (same device and dtype), if any.
Rows rows_of(const ArrayView& v, const ArrayView* ref = nullptr) {
  if (v.ndim() != 1 && v.ndim() != 2)
    throw py::value_error(v.name + " must have shape [K] or [B, K]; got " +
                          std::to_string(v.ndim()) + " axes");
  Spec spec = Spec().dtype(kF32or64).rows(1);
  if (ref != nullptr) spec.on(*ref);
  spec.check(v);
  if (ref != nullptr) require_same_dtype(v, *ref);
  Rows r{v.ndim() == 2 ? v.shape[0] : 1, v.shape[v.ndim() - 1], 0};
  if (r.cols == 0)
    throw py::value_error(v.name + " is empty: the softmax needs at least one entry");
  r.stride = v.ndim() == 2 ? v.strides[0] : r.cols;
  return r;
}

std::vector<double> scales(const std::vector<double>& scale, int64_t rows) {
  if (scale.size() == 1) return std::vector<double>(static_cast<size_t>(rows), scale[0]);
  if (static_cast<int64_t>(scale.size()) != rows)
    throw py::value_error("scale must be one number or one per row (" + std::to_string(rows) +
                          "); got " + std::to_string(scale.size()));
  return scale;
}

// The outputs of a softmax over x: lse [B] float64 and out (optional; x's shape, float32 or
// float64), contiguous on x's device; the CUDA workspace.
struct Outputs {
  ArrayView lse, out, workspace;
};

Outputs outputs(SoftmaxArgs& a, const ArrayView& xv, py::handle out, py::handle lse,
                py::handle workspace, int64_t stream) {
  Outputs o;
  o.lse = typed(lse, "lse", Spec().on(xv).dtype(kF64).shape({a.rows}, "[B]").writable(), stream);
  a.lse = o.lse.as<double>();
  a.out_dtype = a.x_dtype;
  if (!out.is_none()) {
    o.out = typed(out, "out", Spec().on(xv).dtype(kF32or64).writable(), stream);
    if (o.out.numel() != a.rows * a.cols)
      throw py::value_error("out must have the shape of " + xv.name);
    a.out = o.out.data;
    a.out_dtype = o.out.dtype;
  }
  if (xv.device == Device::cuda) {
    o.workspace = typed(workspace, "workspace", Spec().on(xv).dtype(kF64).writable(), stream);
    if (o.workspace.numel() < softmax_workspace_len(a.rows, a.cols))
      throw py::value_error("workspace is too small; allocate softmax_workspace_len(B, K) doubles");
    a.workspace = o.workspace.as<double>();
  }
  return o;
}

void run(const SoftmaxArgs& a, const ArrayView& xv, int64_t stream) {
  run_on_device(xv, stream, [&] { throw_value_error_if_failed(cpu::softmax(a)); },
                [&](void* s) { throw_if_failed(cuda::softmax(a, s)); });
}

void softmax_rows(py::handle x, const std::vector<double>& scale, py::handle out, py::handle lse,
                  py::handle workspace, int64_t stream) {
  ArrayView xv = view(x, "x", stream);
  const Rows r = rows_of(xv);
  const std::vector<double> sc = scales(scale, r.rows);
  const bool unscaled = std::all_of(sc.begin(), sc.end(), [](double s) { return s == 1.0; });
  SoftmaxArgs a{xv.dtype, xv.dtype, r.rows, r.cols, xv.data, r.stride, nullptr, 0, sc.data(),
                nullptr, nullptr, nullptr, unscaled ? "x" : "scale * x"};
  const Outputs o = outputs(a, xv, out, lse, workspace, stream);
  require_disjoint({&o.out, &o.lse, &o.workspace}, {&xv});
  if (r.rows > 0) run(a, xv, stream);
}

// G += g (dense) or G[ids] += values (sparse), then lse / p of scale * G.
void eg_step(py::handle G, py::handle g, py::handle ids, py::handle values,
             const std::vector<double>& scale, py::handle out, py::handle lse, py::handle workspace,
             int64_t stream) {
  ArrayView gv = view(G, "G", stream);
  const Rows r = rows_of(gv);
  require_writable(gv);
  const std::vector<double> sc = scales(scale, r.rows);
  SoftmaxArgs a{gv.dtype, gv.dtype, r.rows, r.cols, gv.data, r.stride, nullptr, 0, sc.data(),
                nullptr, nullptr, nullptr,
                g.is_none() ? "-eta * G (after G[ids] += values)" : "-eta * (G + g)"};
  const Outputs o = outputs(a, gv, out, lse, workspace, stream);

  if (!g.is_none()) {
    const ArrayView dv = view(g, "g", stream);
    a.add_stride = rows_of(dv, &gv).stride;
    if (dv.shape != gv.shape) throw py::value_error("g must have the shape of G");
    a.add = dv.data;
    require_disjoint({&gv, &o.out, &o.lse, &o.workspace}, {&dv});
    if (r.rows > 0) run(a, gv, stream);
    return;
  }

  // Sparse: ids/values [m] (1-D G) or [B, m]; G must be float64 and contiguous.
  Spec().dtype(kF64).check(gv);
  const ArrayView iv = typed(ids, "ids", Spec().on(gv).dtype(kI64), stream);
  const ArrayView vv = typed(values, "values", Spec().on(gv).dtype(kF64), stream);
  if (iv.shape != vv.shape) throw py::value_error("ids and values must have the same shape");
  if (iv.ndim() != gv.ndim() || (gv.ndim() == 2 && iv.shape[0] != r.rows))
    throw py::value_error(gv.ndim() == 1 ? "ids must have shape [m] for G of shape [K]"
                                         : "ids must have shape [B, m] for G of shape [B, K]");
  const SparseGradient sparse{iv.as<const int64_t>(), vv.as<const double>(),
                              iv.shape[iv.ndim() - 1]};
  require_disjoint({&gv, &o.out, &o.lse, &o.workspace}, {&iv, &vv});
  if (gv.device == Device::cpu) {
    for (int64_t b = 0; b < r.rows; ++b) {
      const std::string suffix = r.rows > 1 ? "[" + std::to_string(b) + "]" : "";
      check_ids(sparse.ids + b * sparse.m, sparse.m, r.cols, "ids" + suffix);
      check_finite(sparse.values + b * sparse.m, sparse.m, "values" + suffix);
    }
  }
  if (r.rows == 0) return;
  run_on_device(gv, stream, [&] { throw_value_error_if_failed(cpu::eg_sparse_step(a, sparse)); },
                [&](void* s) { throw_if_failed(cuda::eg_sparse_step(a, sparse, s)); });
}

void register_softmax(py::module_& m) {
  m.def("softmax_rows", &softmax_rows, py::arg("x"), py::arg("scale"), py::arg("out"),
        py::arg("lse"), py::arg("workspace"), py::arg("stream"),
        "lse[b] = logsumexp(scale[b] * x[b]) and optionally out[b] = softmax(scale[b] * x[b]); "
        "see fastfair.ops.softmax.");
  m.def("eg_step", &eg_step, py::arg("G"), py::arg("g"), py::arg("ids"), py::arg("values"),
        py::arg("scale"), py::arg("out"), py::arg("lse"), py::arg("workspace"), py::arg("stream"),
        "G += g (or G[ids] += values), then lse / softmax of scale * G; see fastfair.ops.eg_step.");
  m.def("softmax_workspace_len", &softmax_workspace_len, py::arg("rows"), py::arg("cols"),
        "Doubles of device scratch the CUDA softmax needs for a [rows, cols] input.");
}
FASTFAIR_REGISTER(register_softmax);

}  // namespace
}  // namespace fastfair::binding
