// Binding of the SuPerFed client passes (reduce, then fused step / mix).
#include <string>
#include <vector>

#include "array.h"
#include "dlpack.h"
#include "fastfair/superfed.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

// Keeps the views alive for the call; references returned by add() stay valid because the
// capacity is reserved up front (more than the 16 arrays any call passes).
struct Checked {
  Checked() { keep.reserve(16); }
  std::vector<ArrayView> keep;
  const ArrayView& add(py::handle obj, const std::string& name, const ArrayView& ref,
                       int64_t stream) {
    keep.push_back(view(obj, name, stream));
    require_same_device(keep.back(), name, ref, "f");
    require_contiguous(keep.back(), name);
    return keep.back();
  }
};

void require_shape(const ArrayView& v, const std::string& name, std::vector<int64_t> shape) {
  if (v.shape != shape) {
    std::string s;
    for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
    throw py::value_error(name + " must have shape [" + s + "]");
  }
}

void require_bytes(const ArrayView& v, const std::string& name) {
  if (!((v.dlpack_code == kDLBool || v.dlpack_code == kDLUInt) && v.dlpack_bits == 8))
    throw py::value_error(name + " must have dtype bool or uint8; got " + v.dtype_str());
}

// f: [m, P] float32; offsets [S + 1] int64; twinned [S] bool/uint8; g [P] float32.
SuperFedLayout layout_of(const ArrayView& fv, py::handle offsets, py::handle twinned,
                         int64_t stream, Checked& c) {
  require_cuda_built(fv, "f");
  require_dtype(fv, "f", DType::f32);
  require_contiguous(fv, "f");
  if (fv.ndim() != 2) throw py::value_error("f must have shape [m, P]");
  const ArrayView& ov = c.add(offsets, "offsets", fv, stream);
  if (ov.dlpack_code != kDLInt || ov.dlpack_bits != 64 || ov.ndim() != 1 || ov.shape[0] < 1)
    throw py::value_error("offsets must be int64 [S + 1]");
  const int64_t S = ov.shape[0] - 1, P = fv.shape[1];
  const ArrayView& tv = c.add(twinned, "twinned", fv, stream);
  require_bytes(tv, "twinned");
  require_shape(tv, "twinned", {S});
  const auto* off = static_cast<const int64_t*>(ov.data);
  if (fv.device == Device::cpu) {  // CUDA offsets are checked by the Python layout object
    if (off[0] != 0 || off[S] != P)
      throw py::value_error("offsets must start at 0 and end at P = " + std::to_string(P));
    for (int64_t s = 0; s < S; ++s)
      if (off[s + 1] < off[s]) throw py::value_error("offsets must be non-decreasing");
  }
  return {fv.shape[0], P, S, off, static_cast<const uint8_t*>(tv.data)};
}

void superfed_reduce(py::handle f, py::handle l, py::handle g, py::handle offsets,
                     py::handle twinned, py::handle out, int64_t stream) {
  Checked c;
  ArrayView fv = view(f, "f", stream);
  const SuperFedLayout L = layout_of(fv, offsets, twinned, stream, c);
  const ArrayView& lv = c.add(l, "l", fv, stream);
  require_dtype(lv, "l", DType::f32);
  require_shape(lv, "l", fv.shape);
  const ArrayView& gv = c.add(g, "g", fv, stream);
  require_dtype(gv, "g", DType::f32);
  require_shape(gv, "g", {L.cols});
  const ArrayView& outv = c.add(out, "out", fv, stream);
  require_dtype(outv, "out", DType::f64);
  require_writable(outv, "out");
  require_shape(outv, "out", {L.rows, L.segments, 4});
  SuperFedReduceArgs a{L, static_cast<const float*>(fv.data), static_cast<const float*>(lv.data),
                       static_cast<const float*>(gv.data), static_cast<double*>(outv.data)};
  run_on_device(fv, stream, [&] { throw_if_failed(cpu::superfed_reduce(a)); },
                [&](void* s) { throw_if_failed(cuda::superfed_reduce(a, s)); });
}

void superfed_step(py::handle f, py::handle l, py::handle g, py::handle grad, py::handle buf_f,
                   py::handle buf_l, py::handle lam, py::handle lam_next, py::handle mixed,
                   py::handle prox, py::handle orth, py::handle active, py::handle offsets,
                   py::handle twinned, double lr, double momentum, double weight_decay,
                   bool train_local, int64_t stream, const std::string& mixed_name) {
  Checked c;
  ArrayView fv = view(f, "f", stream);
  const SuperFedLayout L = layout_of(fv, offsets, twinned, stream, c);
  require_writable(fv, "f");
  auto state = [&](py::handle h, const char* name, bool writable) -> void* {
    const ArrayView& v = c.add(h, name, fv, stream);
    require_dtype(v, name, DType::f32);
    require_shape(v, name, fv.shape);
    if (writable) require_writable(v, name);
    return v.data;
  };
  auto f64 = [&](py::handle h, const char* name, std::vector<int64_t> shape) -> const double* {
    const ArrayView& v = c.add(h, name, fv, stream);
    require_dtype(v, name, DType::f64);
    require_shape(v, name, shape);
    return static_cast<const double*>(v.data);
  };
  SuperFedStepArgs a{};
  a.layout = L;
  a.f = static_cast<float*>(fv.data);
  a.l = static_cast<float*>(state(l, "l", train_local && !grad.is_none()));
  a.mixed = static_cast<float*>(state(mixed, mixed_name.c_str(), true));
  a.lam = f64(lam, "lam", {L.rows, L.segments});
  if (!lam_next.is_none()) a.lam_next = f64(lam_next, "lam_next", {L.rows, L.segments});
  if (!grad.is_none()) {
    if (!(lr >= 0.0) || !(momentum >= 0.0) || !(weight_decay >= 0.0))
      throw py::value_error("lr, momentum and weight_decay must be >= 0");
    a.grad = static_cast<const float*>(state(grad, "grad", false));
    a.buf_f = static_cast<float*>(state(buf_f, "buf_f", true));
    a.buf_l = static_cast<float*>(state(buf_l, "buf_l", true));
    const ArrayView& gv = c.add(g, "g", fv, stream);
    require_dtype(gv, "g", DType::f32);
    require_shape(gv, "g", {L.cols});
    a.g = static_cast<const float*>(gv.data);
    a.prox = f64(prox, "prox", {L.rows, L.segments});
    a.orth = f64(orth, "orth", {L.rows, 4});
    const ArrayView& av = c.add(active, "active", fv, stream);
    require_bytes(av, "active");
    require_shape(av, "active", {L.rows});
    a.active = static_cast<const uint8_t*>(av.data);
  }
  a.lr = lr;
  a.momentum = momentum;
  a.weight_decay = weight_decay;
  a.train_local = train_local;
  run_on_device(fv, stream, [&] { throw_if_failed(cpu::superfed_step(a)); },
                [&](void* s) { throw_if_failed(cuda::superfed_step(a, s)); });
}

void register_superfed(py::module_& m) {
  m.def("superfed_reduce", &superfed_reduce, py::arg("f"), py::arg("l"), py::arg("g"),
        py::arg("offsets"), py::arg("twinned"), py::arg("out"), py::arg("stream"),
        "Per row and segment: <f, l>, |f|^2, |l|^2, |f - g|^2; see fastfair.ops.superfed_reduce.");
  m.def("superfed_step", &superfed_step, py::arg("f"), py::arg("l"), py::arg("g"),
        py::arg("grad"), py::arg("buf_f"), py::arg("buf_l"), py::arg("lam"), py::arg("lam_next"),
        py::arg("mixed"), py::arg("prox"), py::arg("orth"), py::arg("active"), py::arg("offsets"),
        py::arg("twinned"), py::arg("lr"), py::arg("momentum"), py::arg("weight_decay"),
        py::arg("train_local"), py::arg("stream"), py::arg("mixed_name"),
        "Fused SuPerFed update of (f, l) and the next mixed model; see "
        "fastfair.ops.superfed_step. mixed_name: what errors call mixed (superfed_mix's out).");
}
FASTFAIR_REGISTER(register_superfed);

}  // namespace
}  // namespace fastfair::binding
