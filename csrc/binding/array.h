// A borrowed view of any array that implements __dlpack__, valid while the view lives.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fastfair/common.h"

namespace fastfair::binding {

namespace py = pybind11;

enum class Device { cpu, cuda };

struct ArrayView {
  py::object capsule;  // keeps the producer's memory alive; its destructor frees the export
  void* data = nullptr;
  Device device = Device::cpu;
  int device_id = 0;
  DType dtype = DType::f32;
  int dlpack_code = 0, dlpack_bits = 0;
  bool is_float = false;  // one of fastfair's four float dtypes
  bool read_only = false;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements, always filled

  int64_t numel() const;
  int ndim() const { return static_cast<int>(shape.size()); }
  // True when the trailing `dims` axes are C-contiguous (so one pointer addresses them as a run),
  // or address nothing (one of them has length 0).
  bool inner_contiguous(int dims) const;
  std::string dtype_str() const;
  std::string device_str() const;
};

// Exports `obj` through `obj.__dlpack__`. `stream` is the consumer stream handed to CUDA producers
// (-1: none). Errors name `name`.
ArrayView view(py::handle obj, const std::string& name, int64_t stream);

// The checks every op makes; each raises ValueError/RuntimeError naming the argument.
void require_float(const ArrayView& a, const std::string& name);
void require_writable(const ArrayView& a, const std::string& name);
void require_same_device(const ArrayView& a, const std::string& name, const ArrayView& ref,
                         const std::string& ref_name);
void require_same_dtype(const ArrayView& a, const std::string& name, const ArrayView& ref,
                        const std::string& ref_name);
void require_dtype(const ArrayView& a, const std::string& name, DType t);
void require_contiguous(const ArrayView& a, const std::string& name);
void require_cuda_built(const ArrayView& a, const std::string& name);

// Makes the array's GPU the current CUDA device for its lifetime (a no-op for CPU arrays and in
// builds without CUDA), so kernels launch where the data lives.
class DeviceGuard {
 public:
  explicit DeviceGuard(const ArrayView& a);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Raises the Python exception for a failed kernel status: RuntimeError, or ValueError where the
// kernel's failures are about the input values (CPU kernels that check their data).
void throw_if_failed(const Status& s);
void throw_value_error_if_failed(const Status& s);

// Runs an op where `ref` lives, with the GIL released and ref's GPU current: on_cpu() for host
// arrays, on_cuda(stream) for CUDA arrays (never called in builds without CUDA, which refuse CUDA
// arrays earlier). Each callable raises its own errors; the GIL is taken back while unwinding.
template <typename OnCpu, typename OnCuda>
void run_on_device(const ArrayView& ref, [[maybe_unused]] int64_t stream, OnCpu&& on_cpu,
                   [[maybe_unused]] OnCuda&& on_cuda) {
  DeviceGuard guard(ref);
  py::gil_scoped_release release;
  if (ref.device == Device::cpu) {
    on_cpu();
    return;
  }
#ifdef FASTFAIR_WITH_CUDA
  on_cuda(reinterpret_cast<void*>(stream));
#endif
}

}  // namespace fastfair::binding
