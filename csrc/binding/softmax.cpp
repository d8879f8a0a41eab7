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

// x is [K] or [B, K] with contiguous rows; float32 or float64.
Rows rows_of(const ArrayView& v, const std::string& name) {
  if (v.ndim() != 1 && v.ndim() != 2)
    throw py::value_error(name + " must have shape [K] or [B, K]; got " + std::to_string(v.ndim()) +
                          " axes");
  if (!v.is_float || (v.dtype != DType::f32 && v.dtype != DType::f64))
    throw py::value_error(name + " must be float32 or float64; got " + v.dtype_str());
  Rows r{v.ndim() == 2 ? v.shape[0] : 1, v.shape[v.ndim() - 1], 0};
  if (r.cols == 0) throw py::value_error(name + " is empty: the softmax needs at least one entry");
  if (r.cols > 1 && v.strides[v.ndim() - 1] != 1)
    throw py::value_error(name + " must be contiguous within each row; pass "
                          "numpy.ascontiguousarray(" + name + ") or " + name + ".contiguous()");
  r.stride = v.ndim() == 2 ? v.strides[0] : r.cols;
  return r;
}

void check_same_shape(const ArrayView& a, const std::string& name, const ArrayView& ref,
                      const std::string& ref_name) {
  if (a.shape != ref.shape)
    throw py::value_error(name + " must have the shape of " + ref_name);
}

std::vector<double> scales(const std::vector<double>& scale, int64_t rows) {
  if (scale.size() == 1) return std::vector<double>(static_cast<size_t>(rows), scale[0]);
  if (static_cast<int64_t>(scale.size()) != rows)
    throw py::value_error("scale must be one number or one per row (" + std::to_string(rows) +
                          "); got " + std::to_string(scale.size()));
  return scale;
}

// lse: [B] float64 contiguous on x's device; out: optional, contiguous, x's shape, float32/64;
// workspace: CUDA only.
void fill_outputs(SoftmaxArgs& a, const ArrayView& xv, py::handle out, py::handle lse,
                  py::handle workspace, int64_t stream, std::vector<ArrayView>& keep) {
  keep.push_back(view(lse, "lse", stream));
  const ArrayView& lv = keep.back();
  require_same_device(lv, "lse", xv, "x");
  require_dtype(lv, "lse", DType::f64);
  require_contiguous(lv, "lse");
  require_writable(lv, "lse");
  if (lv.numel() != a.rows) throw py::value_error("lse must have one entry per row");
  a.lse = static_cast<double*>(lv.data);
  a.out_dtype = a.x_dtype;
  if (!out.is_none()) {
    keep.push_back(view(out, "out", stream));
    const ArrayView& ov = keep.back();
    require_same_device(ov, "out", xv, "x");
    if (!ov.is_float || (ov.dtype != DType::f32 && ov.dtype != DType::f64))
      throw py::value_error("out must be float32 or float64; got " + ov.dtype_str());
    require_contiguous(ov, "out");
    require_writable(ov, "out");
    if (ov.numel() != a.rows * a.cols) throw py::value_error("out must have the shape of x");
    a.out = ov.data;
    a.out_dtype = ov.dtype;
  }
  if (xv.device == Device::cuda) {
    keep.push_back(view(workspace, "workspace", stream));
    const ArrayView& wv = keep.back();
    require_same_device(wv, "workspace", xv, "x");
    require_dtype(wv, "workspace", DType::f64);
    if (wv.numel() < softmax_workspace_len(a.rows, a.cols))
      throw py::value_error("workspace is too small; allocate softmax_workspace_len(B, K) doubles");
    a.workspace = static_cast<double*>(wv.data);
  }
}

void run(const SoftmaxArgs& a, const ArrayView& xv, int64_t stream) {
  run_on_device(xv, stream, [&] { throw_value_error_if_failed(cpu::softmax(a)); },
                [&](void* s) { throw_if_failed(cuda::softmax(a, s)); });
}

void softmax_rows(py::handle x, const std::vector<double>& scale, py::handle out, py::handle lse,
                  py::handle workspace, int64_t stream) {
  ArrayView xv = view(x, "x", stream);
  require_cuda_built(xv, "x");
  const Rows r = rows_of(xv, "x");
  const std::vector<double> sc = scales(scale, r.rows);
  const bool unscaled = std::all_of(sc.begin(), sc.end(), [](double s) { return s == 1.0; });
  SoftmaxArgs a{xv.dtype, xv.dtype, r.rows, r.cols, xv.data, r.stride, nullptr, 0, sc.data(),
                nullptr, nullptr, nullptr, unscaled ? "x" : "scale * x"};
  std::vector<ArrayView> keep;
  fill_outputs(a, xv, out, lse, workspace, stream, keep);
  run(a, xv, stream);
}

// G += g (dense) or G[ids] += values (sparse), then lse / p of scale * G.
void eg_step(py::handle G, py::handle g, py::handle ids, py::handle values,
             const std::vector<double>& scale, py::handle out, py::handle lse, py::handle workspace,
             int64_t stream) {
  ArrayView gv = view(G, "G", stream);
  require_cuda_built(gv, "G");
  const Rows r = rows_of(gv, "G");
  require_writable(gv, "G");
  const std::vector<double> sc = scales(scale, r.rows);
  SoftmaxArgs a{gv.dtype, gv.dtype, r.rows, r.cols, gv.data, r.stride, nullptr, 0, sc.data(),
                nullptr, nullptr, nullptr,
                g.is_none() ? "-eta * G (after G[ids] += values)" : "-eta * (G + g)"};
  std::vector<ArrayView> keep;
  fill_outputs(a, gv, out, lse, workspace, stream, keep);

  if (!g.is_none()) {
    ArrayView dv = view(g, "g", stream);
    require_same_device(dv, "g", gv, "G");
    require_same_dtype(dv, "g", gv, "G");
    check_same_shape(dv, "g", gv, "G");
    a.add = dv.data;
    a.add_stride = rows_of(dv, "g").stride;
    keep.push_back(std::move(dv));
    run(a, gv, stream);
    return;
  }

  // Sparse: ids/values [m] (1-D G) or [B, m]; G must be float64 and contiguous.
  require_dtype(gv, "G", DType::f64);
  require_contiguous(gv, "G");
  ArrayView iv = view(ids, "ids", stream), vv = view(values, "values", stream);
  require_same_device(iv, "ids", gv, "G");
  require_same_device(vv, "values", gv, "G");
  require_int64(iv, "ids");
  require_dtype(vv, "values", DType::f64);
  if (vv.numel() > 0) require_contiguous(vv, "values");
  if (iv.shape != vv.shape) throw py::value_error("ids and values must have the same shape");
  if (iv.ndim() != gv.ndim() || (gv.ndim() == 2 && iv.shape[0] != r.rows))
    throw py::value_error(gv.ndim() == 1 ? "ids must have shape [m] for G of shape [K]"
                                         : "ids must have shape [B, m] for G of shape [B, K]");
  const SparseGradient sparse{static_cast<const int64_t*>(iv.data),
                              static_cast<const double*>(vv.data), iv.shape[iv.ndim() - 1]};
  if (gv.device == Device::cpu) {
    for (int64_t b = 0; b < r.rows; ++b) {
      const std::string suffix = r.rows > 1 ? "[" + std::to_string(b) + "]" : "";
      check_ids(sparse.ids + b * sparse.m, sparse.m, r.cols, "ids" + suffix);
      check_finite(sparse.values + b * sparse.m, sparse.m, "values" + suffix);
    }
  }
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
