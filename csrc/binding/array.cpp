#include "array.h"

#include <sstream>

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
                     : dlpack_code == kDLBool ? "bool" : "code";
  return std::string(kind) + std::to_string(dlpack_bits);
}

std::string ArrayView::device_str() const {
  return device == Device::cpu ? "cpu" : "cuda:" + std::to_string(device_id);
}

namespace {

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
    if (!e.matches(PyExc_TypeError)) throw;  // producers predating DLPack 1.0 reject max_version
  }
  kwargs = py::dict();
  if (cuda && stream >= 0) kwargs["stream"] = py::int_(stream);
  return method(**kwargs);
}

}  // namespace

ArrayView view(py::handle obj, const std::string& name, int64_t stream) {
  bool cuda = false;
  if (py::hasattr(obj, "__dlpack_device__")) {
    py::tuple dev = obj.attr("__dlpack_device__")();
    cuda = dev[0].cast<int>() == kDLCUDA;
  }
  ArrayView v;
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
                            "; fastfair accepts CPU and CUDA arrays");
  }
  v.device_id = t->device.device_id;
  v.dlpack_code = t->dtype.code;
  v.dlpack_bits = t->dtype.bits;
  if (t->dtype.lanes == 1) {
    if (t->dtype.code == kDLFloat && t->dtype.bits == 32) { v.dtype = DType::f32; v.is_float = true; }
    if (t->dtype.code == kDLFloat && t->dtype.bits == 64) { v.dtype = DType::f64; v.is_float = true; }
    if (t->dtype.code == kDLFloat && t->dtype.bits == 16) { v.dtype = DType::f16; v.is_float = true; }
    if (t->dtype.code == kDLBfloat && t->dtype.bits == 16) { v.dtype = DType::bf16; v.is_float = true; }
  }
  v.shape.assign(t->shape, t->shape + t->ndim);
  v.strides.resize(t->ndim);
  int64_t expected = 1;
  for (int k = t->ndim - 1; k >= 0; --k) {
    v.strides[k] = t->strides ? t->strides[k] : expected;
    expected *= t->shape[k];
  }
  v.data = static_cast<char*>(t->data) + t->byte_offset;
  return v;
}

void require_float(const ArrayView& a, const std::string& name) {
  if (!a.is_float)
    throw py::value_error(name + " must be float32, float64, float16 or bfloat16; got " + a.dtype_str());
}

void require_writable(const ArrayView& a, const std::string& name) {
  if (a.read_only) throw py::value_error(name + " is read-only; pass a writable array");
}

void require_same_device(const ArrayView& a, const std::string& name, const ArrayView& ref,
                         const std::string& ref_name) {
  if (a.device != ref.device || a.device_id != ref.device_id)
    throw py::value_error(name + " is on " + a.device_str() + " but " + ref_name + " is on " +
                          ref.device_str() + "; move them to one device");
}

void require_same_dtype(const ArrayView& a, const std::string& name, const ArrayView& ref,
                        const std::string& ref_name) {
  if (a.dtype_str() != ref.dtype_str())
    throw py::value_error(name + " has dtype " + a.dtype_str() + " but " + ref_name + " has " +
                          ref.dtype_str() + "; cast them to one dtype");
}

void require_dtype(const ArrayView& a, const std::string& name, DType t) {
  if (!a.is_float || a.dtype != t)
    throw py::value_error(name + " must have dtype " + std::string(dtype_name(t)) + "; got " +
                          a.dtype_str());
}

void require_contiguous(const ArrayView& a, const std::string& name) {
  if (!a.inner_contiguous(a.ndim()))
    throw py::value_error(name + " must be C-contiguous; pass a contiguous copy "
                          "(numpy.ascontiguousarray(x) or x.contiguous())");
}

void require_cuda_built(const ArrayView& a, const std::string& name) {
#ifndef FASTFAIR_WITH_CUDA
  if (a.device == Device::cuda)
    throw std::runtime_error("fastfair was built without CUDA, but " + name + " is on " +
                             a.device_str() + "; rebuild with FASTFAIR_CUDA=ON or pass CPU arrays");
#else
  if (a.device != Device::cuda) return;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    throw std::runtime_error(name + " is on " + a.device_str() +
                             ", but no CUDA device is usable by fastfair in this process");
  }
#endif
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

}  // namespace fastfair::binding
