// Binding of the weighted-averaging kernel: rows of one array, or lists of per-client segments.
#include <pybind11/stl.h>

#include <string>
#include <tuple>
#include <vector>

#include "array.h"
#include "fastfair/weighted_average.h"
#include "registry.h"

namespace fastfair::binding {
namespace {

DType accumulator_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// What the caller called the arrays, so that errors name them: weighted_average passes
// ("X", "w", "out" or "base", true, true); Accumulator.add ("update", "weight", "the running sum",
// false, list form). The client index appears in element names only when per_client, the array
// index only when per_array: X[i][l], update[l], update.
struct Names {
  std::string x, w, out;
  bool per_client, per_array;

  std::string client(int64_t i) const {
    return per_client ? x + "[" + std::to_string(i) + "]" : x;
  }
  std::string element(int64_t i, int64_t l) const {
    return per_array ? client(i) + "[" + std::to_string(l) + "]" : client(i);
  }
  std::string output(int64_t l) const {
    return per_array ? out + "[" + std::to_string(l) + "]" : out;
  }
};
using NameTuple = std::tuple<std::string, std::string, std::string, bool, bool>;

Names names_of(const NameTuple& t) {
  return Names{std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t), std::get<4>(t)};
}

AverageMode parse_mode(const std::string& mode) {
  if (mode == "write") return AverageMode::write;
  if (mode == "accumulate") return AverageMode::accumulate;
  if (mode == "server_step") return AverageMode::server_step;
  throw py::value_error("mode must be 'write', 'accumulate' or 'server_step'; got '" + mode + "'");
}

// Checks an output segment against its input segment `ref` (called `ref_name`) and the mode.
void check_output(const ArrayView& out, const ArrayView& ref, const std::string& ref_name,
                  int64_t numel, AverageMode mode) {
  Spec().on(ref).writable().check(out);
  if (mode == AverageMode::accumulate) {
    if (!out.is_float || out.dtype != accumulator_dtype(ref.dtype))
      throw py::value_error(ref_name + " has dtype " + ref.dtype_str() + ", but " + out.name +
                            " accumulates " + out.dtype_str() + ": add updates of one dtype");
  } else if (!out.is_float || out.dtype != ref.dtype) {
    throw py::value_error(out.name + " must have the dtype of " + ref_name + " (" +
                          ref.dtype_str() + "); got " + out.dtype_str());
  }
  if (out.numel() != numel)
    throw py::value_error(out.name + " has " + std::to_string(out.numel()) + " elements but " +
                          ref_name + " has " + std::to_string(numel));
}

ArrayView check_weights(py::handle w, const std::string& w_name, const ArrayView& ref, int64_t n,
                        int64_t stream) {
  return typed(w, w_name, Spec().on(ref).dtype(kF64).shape({n}, "[N]"), stream);
}

void launch(AverageArgs& args, const ArrayView& ref, int64_t stream) {
  run_on_device(ref, stream, [&] { throw_if_failed(cpu::weighted_average(args)); },
                [&](void* s) { throw_if_failed(cuda::weighted_average(args, s)); });
}

// X is [N, *shape]: the trailing axes of each row must be contiguous, the row stride is free.
void weighted_average_rows(py::handle X, py::handle w, py::handle out, const std::string& mode_name,
                           double lr, int64_t stream, const NameTuple& name_tuple) {
  const AverageMode mode = parse_mode(mode_name);
  const Names names = names_of(name_tuple);
  const std::string& x = names.x;
  ArrayView xv = view(X, x, stream);
  require_float(xv);
  if (xv.ndim() < 1) throw py::value_error(x + " must have at least one axis (clients first)");
  const int64_t n = xv.shape[0];
  if (n == 0) throw py::value_error(x + " has no rows: at least one client update is needed");
  Spec().rows(xv.ndim() - 1).check(xv);  // only the client axis may be strided
  ArrayView wv = check_weights(w, names.w, xv, n, stream);
  const int64_t d = xv.numel() / n;
  ArrayView ov = view(out, names.out, stream);
  check_output(ov, xv, "each row of " + x, d, mode);
  require_disjoint({&ov}, {&xv, &wv});

  const int64_t row_bytes = xv.strides[0] * dtype_size(xv.dtype);
  std::vector<const void*> inputs(n);
  for (int64_t i = 0; i < n; ++i) inputs[i] = static_cast<const char*>(xv.data) + i * row_bytes;
  void* outputs[1] = {ov.data};
  AverageArgs args{xv.dtype, n, 1, &d, inputs.data(), wv.as<const double>(), outputs, mode, lr};
  if (d > 0) launch(args, xv, stream);
}

bool is_list(py::handle h) { return py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h); }

// updates[i][l] is client i's segment l; out[l] receives segment l.
void weighted_average_lists(const py::sequence& updates, py::handle w, py::handle out,
                            const std::string& mode_name, double lr, int64_t stream,
                            const NameTuple& name_tuple) {
  const AverageMode mode = parse_mode(mode_name);
  const Names names = names_of(name_tuple);
  const int64_t n = static_cast<int64_t>(py::len(updates));
  if (n == 0) throw py::value_error(names.x + " is empty: at least one client update is needed");
  for (int64_t i = 0; i < n; ++i)
    if (!is_list(updates[i]))
      throw py::type_error(names.client(i) + " must be a list of arrays (one client update); got " +
                           std::string(py::str(py::type::of(updates[i]).attr("__name__"))));
  const int64_t num_segments = static_cast<int64_t>(py::len(updates[0]));
  if (num_segments == 0)
    throw py::value_error(names.client(0) + " is empty: a client update needs arrays");
  if (!is_list(out) || static_cast<int64_t>(py::len(out)) != num_segments)
    throw py::value_error(names.out + " must be a list of " + std::to_string(num_segments) +
                          " arrays, one per array of " + names.client(0));

  std::vector<ArrayView> first;  // client 0's segments, the reference for shapes and dtype
  std::vector<ArrayView> rest;   // the others: every export stays alive until the kernel has run
  rest.reserve((n - 1) * num_segments);
  std::vector<const void*> inputs(n * num_segments);
  std::vector<int64_t> segment_len(num_segments);
  for (int64_t i = 0; i < n; ++i) {
    py::sequence client = py::reinterpret_borrow<py::sequence>(updates[i]);
    if (static_cast<int64_t>(py::len(client)) != num_segments)
      throw py::value_error(names.client(i) + " has " + std::to_string(py::len(client)) +
                            " arrays but " + names.client(0) + " has " +
                            std::to_string(num_segments));
    for (int64_t l = 0; l < num_segments; ++l) {
      ArrayView v = view(client[l], names.element(i, l), stream);
      if (i == 0) {
        require_float(v);
        (l == 0 ? Spec() : Spec().on(first[0])).check(v);
        if (l > 0) require_same_dtype(v, first[0]);
      } else {
        const ArrayView& ref = first[l];
        Spec().on(ref).check(v);
        require_same_dtype(v, ref);
        if (v.shape != ref.shape)
          throw py::value_error(v.name + " has a different shape from " + ref.name);
      }
      inputs[i * num_segments + l] = v.data;
      segment_len[l] = v.numel();
      (i == 0 ? first : rest).push_back(std::move(v));
    }
  }
  ArrayView wv = check_weights(w, names.w, first[0], n, stream);
  std::vector<ArrayView> outs;
  outs.reserve(num_segments);
  std::vector<void*> outputs(num_segments);
  const py::sequence out_list = py::reinterpret_borrow<py::sequence>(out);
  for (int64_t l = 0; l < num_segments; ++l) {
    outs.push_back(view(out_list[l], names.output(l), stream));
    check_output(outs.back(), first[l], first[l].name, segment_len[l], mode);
    outputs[l] = outs.back().data;
  }
  std::vector<const ArrayView*> written, read{&wv};
  for (const ArrayView& v : outs) written.push_back(&v);
  for (const auto* group : {&first, &rest})
    for (const ArrayView& v : *group) read.push_back(&v);
  require_disjoint(written, read);
  AverageArgs args{first[0].dtype, n, num_segments, segment_len.data(), inputs.data(),
                   wv.as<const double>(), outputs.data(), mode, lr};
  launch(args, first[0], stream);
}

void register_weighted_average(py::module_& m) {
  m.def("weighted_average_rows", &weighted_average_rows, py::arg("X"), py::arg("w"),
        py::arg("out"), py::arg("mode"), py::arg("lr"), py::arg("stream"), py::arg("names"),
        "Sum over rows of X [N, ...] weighted by w [N] (float64) into out; see fastfair.ops. "
        "names = (X, w, out, per_client, per_array) as the caller calls them, for errors.");
  m.def("weighted_average_lists", &weighted_average_lists, py::arg("updates"), py::arg("w"),
        py::arg("out"), py::arg("mode"), py::arg("lr"), py::arg("stream"), py::arg("names"),
        "Multi-tensor weighted sum of N lists of L arrays into L outputs; see fastfair.ops. "
        "names = (updates, w, out, per_client, per_array) as the caller calls them, for errors.");
}
FASTFAIR_REGISTER(register_weighted_average);

}  // namespace
}  // namespace fastfair::binding
