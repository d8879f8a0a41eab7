#include "array.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "dlpack.h"

#ifdef FASTFAIR_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fastfair::binding {

int64_t ArrayView::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

bool ArrayView::inner_contiguous(int dims) const {
  for (int k = ndim() - 1; k >= ndim() - dims && k >= 0; --k)
    if (shape[k] == 0) return true;  // nothing is addressed; exporters give such axes any stride
  int64_t expected = 1;
  for (int k = ndim() - 1; k >= ndim() - dims && k >= 0; --k) {
    if (shape[k] != 1 && strides[k] != expected) return false;
    expected *= shape[k];
  }
  return true;
}

std::string ArrayView::dtype_str() const {
  if (is_float) return dtype_name(dtype);
  const char* kind = dlpack_code == kDLInt ? "int" : dlpack_code == kDLUInt ? "uint"
                     : dlpack_code == kDLBool ? "bool" : dlpack_code == kDLComplex ? "complex"
                     : "code";
  return std::string(kind) + std::to_string(dlpack_bits);
}

std::string ArrayView::device_str() const {
  return device == Device::cpu ? "cpu" : "cuda:" + std::to_string(device_id);
}

namespace {

// Re-raises a producer's refusal to export `obj` (BufferError, ValueError, RuntimeError) as a
// ValueError that names the argument and the fix, chained to the producer's error; other errors
// pass unchanged.
[[noreturn]] void refuse_export(py::handle obj, const std::string& name, py::error_already_set& e) {
  if (!e.matches(PyExc_BufferError) && !e.matches(PyExc_ValueError) &&
      !e.matches(PyExc_RuntimeError))
    throw;
  std::string msg;
  py::object dtype = py::getattr(obj, "dtype", py::none());
  if (py::hasattr(dtype, "isnative") && !py::bool_(dtype.attr("isnative"))) {
    msg = name + " has non-native byte order (dtype " + std::string(py::str(dtype.attr("str"))) +
          "), which DLPack cannot carry; pass " + name + ".astype(" + name +
          ".dtype.newbyteorder('='))";
  } else {
    msg = name + " cannot be exported through DLPack (" + std::string(py::str(e.value())) +
          "); pass a dense NumPy array, or a dense tensor on the CPU or a CUDA device";
  }
  py::raise_from(e, PyExc_ValueError, msg.c_str());
  throw py::error_already_set();
}

py::object export_capsule(py::handle obj, const std::string& name, bool cuda, int64_t stream) {
  py::object method = py::getattr(obj, "__dlpack__", py::none());
  if (method.is_none()) {
    throw py::type_error(name + " must be an array that supports __dlpack__ (NumPy, PyTorch, "
                         "CuPy, JAX); got " + std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
  py::dict kwargs;
  if (cuda && stream >= 0) kwargs["stream"] = py::int_(stream);
  kwargs["max_version"] = py::make_tuple(1, 0);
  try {
    return method(**kwargs);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) refuse_export(obj, name, e);
    // producers predating DLPack 1.0 reject max_version
  }
  kwargs = py::dict();
  if (cuda && stream >= 0) kwargs["stream"] = py::int_(stream);
  try {
    return method(**kwargs);
  } catch (py::error_already_set& e) {
    refuse_export(obj, name, e);
  }
}

// torch.Tensor's types and the DLPack codes of its dtypes, looked up once torch is imported by
// the caller (fastfair never imports it). Leaked on purpose: it must outlive interpreter
// teardown.
struct TorchTypes {
  PyObject* tensor;
  PyObject* strided;
  std::vector<std::pair<PyObject*, std::pair<int, int>>> dtypes;  // dtype -> (code, bits)
};

const TorchTypes* torch_types() {
  static const TorchTypes* types = nullptr;
  if (types != nullptr) return types;
  PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");
  if (torch == nullptr) return nullptr;
  py::module_ mod = py::reinterpret_borrow<py::module_>(torch);
  auto* t = new TorchTypes;
  t->tensor = py::object(mod.attr("Tensor")).release().ptr();
  t->strided = py::object(mod.attr("strided")).release().ptr();
  const std::pair<const char*, std::pair<int, int>> codes[] = {
      {"float32", {kDLFloat, 32}}, {"float64", {kDLFloat, 64}}, {"float16", {kDLFloat, 16}},
      {"bfloat16", {kDLBfloat, 16}}, {"int64", {kDLInt, 64}}, {"int32", {kDLInt, 32}},
      {"int16", {kDLInt, 16}}, {"int8", {kDLInt, 8}}, {"uint8", {kDLUInt, 8}},
      {"bool", {kDLBool, 8}}};
  for (const auto& [dtype, code] : codes)
    t->dtypes.push_back({py::object(mod.attr(dtype)).release().ptr(), code});
  types = t;
  return types;
}

// The attribute names torch_view reads, interned once.
struct TorchNames {
  PyObject *requires_grad, *detach, *is_neg, *resolve_neg, *layout, *dtype, *is_cuda, *is_cpu,
      *get_device, *shape, *stride, *data_ptr;
};

const TorchNames& torch_names() {
  static const TorchNames names{
      PyUnicode_InternFromString("requires_grad"), PyUnicode_InternFromString("detach"),
      PyUnicode_InternFromString("is_neg"), PyUnicode_InternFromString("resolve_neg"),
      PyUnicode_InternFromString("layout"), PyUnicode_InternFromString("dtype"),
      PyUnicode_InternFromString("is_cuda"),
      PyUnicode_InternFromString("is_cpu"), PyUnicode_InternFromString("get_device"),
      PyUnicode_InternFromString("shape"), PyUnicode_InternFromString("stride"),
      PyUnicode_InternFromString("data_ptr")};
  return names;
}

py::object get(py::handle obj, PyObject* name) {
  PyObject* r = PyObject_GetAttr(obj.ptr(), name);
  if (r == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

py::object call(py::handle obj, PyObject* name) {
  PyObject* r = PyObject_CallMethodNoArgs(obj.ptr(), name);
  if (r == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

std::vector<int64_t> int_tuple(const py::object& t) {
  std::vector<int64_t> v(static_cast<size_t>(PyTuple_GET_SIZE(t.ptr())));
  for (size_t k = 0; k < v.size(); ++k) v[k] = PyLong_AsLongLong(PyTuple_GET_ITEM(t.ptr(), k));
  return v;
}

// torch tensors are read through their attributes: Tensor.__dlpack__ is Python code with stream
// bookkeeping (about 20 us per CUDA tensor), which would dominate a list of thousands of
// parameters. Stream ordering for an explicit stream= is arranged once per call by the Python
// layer (fastfair._arrays.current_stream); tensors that need grad are read through a detached
// alias, negated views (torch's lazy neg bit, which DLPack exports without the sign) through a
// resolved copy marked read-only so that no output is written into a copy. Sparse layouts and
// devices other than CPU and CUDA (meta, mps, ...) are refused here, naming the argument and the
// fix. Returns false for dtypes this path does not cover: __dlpack__ then handles them.
bool torch_view(py::handle obj, const std::string& name, ArrayView* v) {
  const TorchTypes* torch = torch_types();
  if (torch == nullptr || PyObject_IsInstance(obj.ptr(), torch->tensor) != 1) return false;
  const TorchNames& n = torch_names();
  py::object t = py::reinterpret_borrow<py::object>(obj);
  if (get(t, n.requires_grad).ptr() == Py_True) t = call(t, n.detach);
  py::object layout = get(t, n.layout);
  if (layout.ptr() != torch->strided) {
    const std::string l = py::str(layout);
    const bool sparse = l.find("sparse") != std::string::npos;
    throw py::value_error(name + (sparse ? " is a sparse tensor (" + l + ")" : " has layout " + l) +
                          "; fastfair reads dense arrays: pass " + name + ".to_dense()");
  }
  const bool cuda = get(t, n.is_cuda).ptr() == Py_True;
  if (!cuda && get(t, n.is_cpu).ptr() != Py_True) {
    const std::string device = py::str(t.attr("device"));
    throw py::value_error(name + " is on " + device +
                          (device == "meta" ? ", which holds no data" : "") +
                          "; pass a tensor on the CPU or a CUDA device");
  }
  const PyObject* dtype = get(t, n.dtype).ptr();  // torch dtypes are singletons: no dangling
  const std::pair<int, int>* code = nullptr;
  for (const auto& entry : torch->dtypes)
    if (dtype == entry.first) code = &entry.second;
  if (code == nullptr) return false;
  if (call(t, n.is_neg).ptr() == Py_True) {
    t = call(t, n.resolve_neg);
    v->read_only = true;
  }
  v->device = cuda ? Device::cuda : Device::cpu;
  v->device_id = cuda ? static_cast<int>(PyLong_AsLong(call(t, n.get_device).ptr())) : 0;
  v->dlpack_code = code->first;
  v->dlpack_bits = code->second;
  v->shape = int_tuple(get(t, n.shape));
  v->strides = int_tuple(call(t, n.stride));
  v->data = PyLong_AsVoidPtr(call(t, n.data_ptr).ptr());
  v->capsule = std::move(t);
  return true;
}

void set_float_dtype(ArrayView* v) {
  const int code = v->dlpack_code, bits = v->dlpack_bits;
  v->is_float = true;
  if (code == kDLFloat && bits == 32) v->dtype = DType::f32;
  else if (code == kDLFloat && bits == 64) v->dtype = DType::f64;
  else if (code == kDLFloat && bits == 16) v->dtype = DType::f16;
  else if (code == kDLBfloat && bits == 16) v->dtype = DType::bf16;
  else v->is_float = false;
}

// An array without elements addresses nothing; exporters give its axes any strides (NumPy: 0).
// Its strides become C-contiguous ones, so that layout checks judge it by its shape alone.
void normalise_empty(ArrayView* v) {
  if (v->numel() != 0) return;
  int64_t expected = 1;
  for (int k = v->ndim() - 1; k >= 0; --k) {
    v->strides[k] = expected;
    expected *= std::max<int64_t>(v->shape[k], 1);
  }
}

}  // namespace

ArrayView view(py::handle obj, const std::string& name, int64_t stream) {
  ArrayView v;
  v.name = name;
  if (torch_view(obj, name, &v)) {
    set_float_dtype(&v);
    normalise_empty(&v);
    return v;
  }
  bool cuda = false;
  if (py::hasattr(obj, "__dlpack_device__")) {
    py::tuple dev = obj.attr("__dlpack_device__")();
    cuda = dev[0].cast<int>() == kDLCUDA;
  }
  v.capsule = export_capsule(obj, name, cuda, stream);
  PyObject* cap = v.capsule.ptr();
  const DLTensor* t = nullptr;
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
    t = &m->dl_tensor;
    v.read_only = (m->flags & kDLPackFlagReadOnly) != 0;
  } else if (PyCapsule_IsValid(cap, "dltensor")) {
    t = &static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"))->dl_tensor;
  } else {
    throw py::type_error(name + ".__dlpack__() did not return a DLPack capsule");
  }

  switch (t->device.device_type) {
    case kDLCPU: case kDLCUDAHost: v.device = Device::cpu; break;
    case kDLCUDA: case kDLCUDAManaged: v.device = Device::cuda; break;
    default:
      throw py::value_error(name + " lives on DLPack device type " +
                            std::to_string(t->device.device_type) +
                            "; pass an array on the CPU or a CUDA device");
  }
  v.device_id = t->device.device_id;
  v.dlpack_code = t->dtype.code;
  v.dlpack_bits = t->dtype.bits;
  if (t->dtype.lanes == 1) set_float_dtype(&v);
  v.shape.assign(t->shape, t->shape + t->ndim);
  v.strides.resize(t->ndim);
  int64_t expected = 1;
  for (int k = t->ndim - 1; k >= 0; --k) {
    v.strides[k] = t->strides ? t->strides[k] : expected;
    expected *= t->shape[k];
  }
  v.data = static_cast<char*>(t->data) + t->byte_offset;
  normalise_empty(&v);
  return v;
}

void require_float(const ArrayView& a) {
  if (!a.is_float)
    throw py::value_error(a.name + " must be float32, float64, float16 or bfloat16; got " +
                          a.dtype_str());
}

void require_writable(const ArrayView& a) {
  if (a.read_only) throw py::value_error(a.name + " is read-only; pass a writable array");
}

void require_same_device(const ArrayView& a, const ArrayView& ref) {
  if (a.device != ref.device || a.device_id != ref.device_id)
    throw py::value_error(a.name + " is on " + a.device_str() + " but " + ref.name + " is on " +
                          ref.device_str() + "; move them to one device");
}

void require_same_dtype(const ArrayView& a, const ArrayView& ref) {
  if (a.dlpack_code != ref.dlpack_code || a.dlpack_bits != ref.dlpack_bits)
    throw py::value_error(a.name + " has dtype " + a.dtype_str() + " but " + ref.name + " has " +
                          ref.dtype_str() + "; cast them to one dtype");
}

void require_contiguous(const ArrayView& a) {
  if (!a.inner_contiguous(a.ndim()))
    throw py::value_error(a.name + " must be C-contiguous; pass a contiguous copy "
                          "(numpy.ascontiguousarray(" + a.name + ") or " + a.name +
                          ".contiguous())");
}

void require_cuda_built(const ArrayView& a) {
#ifndef FASTFAIR_WITH_CUDA
  if (a.device == Device::cuda)
    throw std::runtime_error("fastfair was built without CUDA, but " + a.name + " is on " +
                             a.device_str() + "; rebuild with FASTFAIR_CUDA=ON or pass CPU arrays");
#else
  if (a.device != Device::cuda) return;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    throw std::runtime_error(a.name + " is on " + a.device_str() +
                             ", but no CUDA device is usable by fastfair in this process");
  }
#endif
}

namespace {

unsigned elem_of(const ArrayView& a) {
  const int code = a.dlpack_code, bits = a.dlpack_bits;
  if (code == kDLFloat) return bits == 32 ? kF32 : bits == 64 ? kF64 : bits == 16 ? kF16 : 0u;
  if (code == kDLBfloat) return bits == 16 ? kBF16 : 0u;
  if (code == kDLBool) return bits == 8 ? kBool : 0u;
  if (code == kDLUInt) return bits == 8 ? kU8 : bits == 64 ? kU64 : 0u;
  if (code == kDLInt) return bits == 64 ? kI64 : 0u;
  return 0u;
}

// "float32 or float64", "bool or uint8", ...
std::string elem_names(unsigned set) {
  static const char* names[] = {"float32", "float64", "float16", "bfloat16",
                                "bool",    "uint8",   "uint64",  "int64"};
  std::vector<std::string> parts;
  for (int k = 0; k < 8; ++k)
    if (set & (1u << k)) parts.push_back(names[k]);
  std::string s;
  for (size_t k = 0; k < parts.size(); ++k)
    s += (k == 0 ? "" : k + 1 == parts.size() ? " or " : ", ") + parts[k];
  return s;
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t k = 0; k < dims.size(); ++k)
    s += (k ? ", " : "") + (dims[k] < 0 ? std::string("*") : std::to_string(dims[k]));
  return s + "]";
}

}  // namespace

void Spec::check(const ArrayView& v) const {
  if (!cpu_only_.empty() && v.device != Device::cpu)
    throw py::value_error(v.name + " is on " + v.device_str() + ": " + cpu_only_);
  if (device_of_ != nullptr)
    require_same_device(v, *device_of_);
  else
    require_cuda_built(v);
  if (dtypes_ != 0 && (elem_of(v) & dtypes_) == 0) {
    const bool floats = (dtypes_ & ~kAnyFloat) == 0 && (dtypes_ & (dtypes_ - 1)) != 0;
    throw py::value_error(v.name + (floats ? " must be " : " must have dtype ") +
                          elem_names(dtypes_) + "; got " + v.dtype_str());
  }
  if (has_shape_) {
    bool ok = v.ndim() == static_cast<int>(dims_.size());
    bool known = true;
    for (size_t k = 0; k < dims_.size(); ++k) {
      known = known && dims_[k] >= 0;
      ok = ok && (dims_[k] < 0 || v.shape[k] == dims_[k]);
    }
    if (!ok) {
      const std::string want = symbols_.empty() ? dims_str(dims_)
                               : known          ? symbols_ + " = " + dims_str(dims_)
                                                : symbols_;
      throw py::value_error(v.name + " must have shape " + want + "; got " + dims_str(v.shape));
    }
  }
  if (contiguous_axes_ < 0 || contiguous_axes_ >= v.ndim()) {
    require_contiguous(v);
  } else if (!v.inner_contiguous(contiguous_axes_)) {
    throw py::value_error(v.name + " must be contiguous within each row (only the leading axis "
                          "may be strided); pass numpy.ascontiguousarray(" + v.name + ") or " +
                          v.name + ".contiguous()");
  }
  if (writable_) require_writable(v);
}

ArrayView typed(py::handle obj, const std::string& name, const Spec& spec, int64_t stream) {
  ArrayView v = view(obj, name, stream);
  spec.check(v);
  return v;
}

namespace {

// The memory an array reaches: `count` runs of `len` bytes, run i starting at start + i * step
// (step >= len), all inside [lo, hi). Arrays whose rows are not contiguous runs are taken as one
// run over their whole span (so overlap with them is judged by the span: conservative).
struct Footprint {
  const ArrayView* array;
  intptr_t lo, hi, start, step, len;
  int64_t count;
};

Footprint footprint(const ArrayView& a) {
  const int64_t size = std::max(1, a.dlpack_bits / 8);
  intptr_t lo = reinterpret_cast<intptr_t>(a.data), hi = lo + size;
  for (int k = 0; k < a.ndim(); ++k) {
    const intptr_t reach = (a.shape[k] - 1) * a.strides[k] * size;
    (reach < 0 ? lo : hi) += reach;
  }
  Footprint f{&a, lo, hi, lo, hi - lo, hi - lo, 1};
  if (a.ndim() >= 1 && a.shape[0] > 1 && a.inner_contiguous(a.ndim() - 1)) {
    const intptr_t len = a.numel() / a.shape[0] * size, step = std::abs(a.strides[0]) * size;
    if (step >= len) f = {&a, lo, hi, lo, step, len, a.shape[0]};  // runs from the lowest row up
  }
  return f;
}

intptr_t floor_div(intptr_t a, intptr_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

// Whether [a, b) meets one of f's runs: the runs i with start + i step < b and
// start + i step + len > a.
bool meets(const Footprint& f, intptr_t a, intptr_t b) {
  if (b <= f.lo || a >= f.hi) return false;
  if (f.count == 1) return true;
  const intptr_t first = std::max<intptr_t>(floor_div(a - f.len - f.start, f.step) + 1, 0);
  const intptr_t last = std::min<intptr_t>(-floor_div(f.start - b, f.step) - 1, f.count - 1);
  return first <= last;
}

bool overlap(const Footprint& x, const Footprint& y) {
  if (x.hi <= y.lo || y.hi <= x.lo) return false;
  const Footprint& few = x.count <= y.count ? x : y;
  const Footprint& many = x.count <= y.count ? y : x;
  for (int64_t i = 0; i < few.count; ++i) {
    const intptr_t s = few.start + i * few.step;
    if (meets(many, s, s + few.len)) return true;
  }
  return false;
}

bool identical(const ArrayView& a, const ArrayView& b) {
  return a.data == b.data && a.shape == b.shape && a.strides == b.strides &&
         a.dlpack_code == b.dlpack_code && a.dlpack_bits == b.dlpack_bits;
}

[[noreturn]] void refuse_overlap(const Footprint& written, const Footprint& other) {
  throw py::value_error(written.array->name + " overlaps " + other.array->name +
                        "; pass a separate buffer");
}

std::vector<Footprint> footprints(const std::vector<const ArrayView*>& arrays) {
  std::vector<Footprint> f;
  f.reserve(arrays.size());
  for (const ArrayView* a : arrays)
    if (a != nullptr && a->data != nullptr && a->numel() > 0) f.push_back(footprint(*a));
  return f;
}

}  // namespace

void require_disjoint(const std::vector<const ArrayView*>& writes,
                      const std::vector<const ArrayView*>& reads, InPlace in_place) {
  std::vector<Footprint> w = footprints(writes), r = footprints(reads);
  auto pairwise = [&] {
    for (size_t i = 0; i < w.size(); ++i) {
      for (size_t j = 0; j < i; ++j)
        if (overlap(w[i], w[j])) refuse_overlap(w[i], w[j]);
      for (const Footprint& o : r)
        if (overlap(w[i], o) && !(w[i].array == in_place.out && o.array == in_place.in &&
                                  identical(*w[i].array, *o.array)))
          refuse_overlap(w[i], o);
    }
  };
  if (in_place.out != nullptr || w.size() * (w.size() + r.size()) <= 4096) return pairwise();
  // Many arrays (a list of per-client segments): sort the written spans; when they are disjoint
  // each other array is looked up among them, O((W + R) log W) instead of O(W (W + R)).
  std::sort(w.begin(), w.end(), [](const Footprint& a, const Footprint& b) { return a.lo < b.lo; });
  for (size_t i = 1; i < w.size(); ++i) {
    if (w[i].lo >= w[i - 1].hi) continue;
    if (overlap(w[i], w[i - 1])) refuse_overlap(w[i], w[i - 1]);
    return pairwise();  // interleaved written arrays: spans cannot be searched
  }
  for (const Footprint& o : r) {
    auto it = std::upper_bound(w.begin(), w.end(), o.lo,
                               [](intptr_t lo, const Footprint& f) { return lo < f.hi; });
    for (; it != w.end() && it->lo < o.hi; ++it)
      if (overlap(*it, o)) refuse_overlap(*it, o);
  }
}

DeviceGuard::DeviceGuard(const ArrayView& a) {
#ifdef FASTFAIR_WITH_CUDA
  if (a.device != Device::cuda) return;
  int current = 0;
  if (cudaGetDevice(&current) == cudaSuccess && current != a.device_id) {
    if (cudaSetDevice(a.device_id) == cudaSuccess) previous_ = current;
  }
#else
  (void)a;
#endif
}

DeviceGuard::~DeviceGuard() {
#ifdef FASTFAIR_WITH_CUDA
  if (previous_ >= 0) cudaSetDevice(previous_);
#endif
}

void throw_if_failed(const Status& s) {
  if (!s.ok) throw std::runtime_error(s.message);
}

void throw_value_error_if_failed(const Status& s) {
  if (!s.ok) throw py::value_error(s.message);
}

}  // namespace fastfair::binding
